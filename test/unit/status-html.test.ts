// The status page's escaping and view model without a browser: every interpolated value is
// escaped, states are judged worst first, and a page's query is read leniently.
import { describe, expect, it } from 'vitest';
import { escapeHtml, markup } from '../../src/monitor/status-html.js';
import type { JobState } from '../../src/monitor/job-states.js';
import { renderJob, renderList } from '../../src/monitor/status-page.js';
import { listView, parseListQuery, stateOf } from '../../src/monitor/status-view.js';
import type { ReplicationReport } from '../../src/replication.js';

const job = (over: Partial<JobState> = {}): JobState => ({
  name: 'j',
  schedule: null,
  tz: null,
  windowMode: 'literal',
  windowFormat: null,
  windowOffset: null,
  alertAfterMs: null,
  createdAt: new Date(0),
  owner: null,
  generation: null,
  held: false,
  expiresInMs: null,
  heldForMs: null,
  lastWindow: null,
  lastCompletedAt: null,
  lastDurationMs: null,
  openWindows: [],
  openCount: 0,
  holder: null,
  due: undefined,
  overdue: false,
  notCompleted: [],
  notCompletedCount: 0,
  intervalMs: null,
  version: 1,
  paused: false,
  pause: null,
  recentJobChanges: 0,
  ...over,
});

describe('escaping', () => {
  it('escapes the five characters that matter in text and in quoted attributes', () => {
    expect(escapeHtml(`<a href="x" title='y'>&amp;</a>`)).toBe(
      '&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;amp;&lt;/a&gt;',
    );
    expect(escapeHtml('plain')).toBe('plain');
  });

  it('markup`` escapes every value, nested arrays included, and keeps its own markup', () => {
    const name = '<img src=x onerror=alert(1)>';
    const out = markup`<td title="${name}">${[name, markup`<b>${name}</b>`]}</td>`.text;
    expect(out).toBe(
      '<td title="&lt;img src=x onerror=alert(1)&gt;">&lt;img src=x onerror=alert(1)&gt;<b>&lt;img src=x onerror=alert(1)&gt;</b></td>',
    );
    expect(markup`${null}${undefined}${false}${0}`.text).toBe('0');
  });
});

describe('view model', () => {
  it('judges a job worst first: overdue, paused, failing, running, healthy', () => {
    const failed = [{ window: 'w', attempts: 1, outcome: 'failed', generation: 1 }];
    expect(stateOf(job({ overdue: true, held: true, openWindows: failed }))).toBe('overdue');
    expect(stateOf(job({ held: true, openWindows: failed }))).toBe('failing');
    expect(stateOf(job({ openWindows: [{ window: 'w', attempts: 1, outcome: 'abandoned', generation: 1 }] }))).toBe(
      'failing',
    );
    expect(
      stateOf(job({ held: true, openWindows: [{ window: 'w', attempts: 1, outcome: 'running', generation: 1 }] })),
    ).toBe('running');
    expect(stateOf(job({ paused: true, held: true, openWindows: failed }))).toBe('paused');
    // An earlier due occurrence not completed, the latest completed: as critical as overdue (check, the alerts).
    const noRun = { window: 'w0', scheduledAt: new Date(0), overdueSince: new Date(1000), outcome: 'no run' };
    expect(stateOf(job({ held: true, notCompleted: [noRun], notCompletedCount: 1 }))).toBe('overdue');
    expect(stateOf(job({ openWindows: [{ window: 'w', attempts: 1, outcome: 'missed', generation: 1 }] }))).toBe(
      'healthy',
    );
  });

  it('reads the query leniently: unknown states and out-of-range pages are clamped, not refused', () => {
    expect(parseListQuery(new URLSearchParams('q=%20abc%20&state=overdue&page=3&per=50'))).toEqual({
      q: 'abc',
      state: 'overdue',
      page: 3,
      per: 50,
    });
    expect(parseListQuery(new URLSearchParams('state=<x>&page=-1&per=999999999'))).toEqual({
      q: '',
      state: '',
      page: 1,
      per: 1000,
    });
    expect(parseListQuery(new URLSearchParams('page=abc&per=0'))).toMatchObject({ page: 1, per: 1 });
  });

  it('filters, counts every state, sorts worst first and pages; a page past the end shows the last', () => {
    const jobs = [
      job({ name: 'a' }),
      job({ name: 'b', overdue: true }),
      job({ name: 'c' }),
      job({ name: 'd', held: true }),
    ];
    const v = listView(new Date(0), jobs, [], { q: '', state: '', page: 9, per: 2 });
    expect(v.counts).toEqual({ overdue: 1, paused: 0, failing: 0, running: 1, healthy: 2 });
    expect(v.pages).toBe(2);
    expect(v.query.page).toBe(2);
    expect(v.items.map((i) => i.job.name)).toEqual(['a', 'c']);
    expect(
      listView(new Date(0), jobs, [], { q: 'B', state: '', page: 1, per: 2 }).items.map((i) => i.job.name),
    ).toEqual(['b']);
    expect(listView(new Date(0), jobs, [], { q: '', state: 'healthy', page: 1, per: 10 }).matched).toBe(2);
  });
});

describe('rendering', () => {
  const store = { kind: 'postgres', location: 'postgres://db/leasejob' };
  const now = new Date('2026-12-01T12:00:00Z');
  const replication = (over: Partial<ReplicationReport>): ReplicationReport => ({
    mode: 'single',
    standbys: 0,
    synchronousStandbys: 0,
    synchronousStandbyNames: '',
    synchronousCommit: 'on',
    timeline: 1,
    fenceEpoch: 1,
    unchecked: [],
    ...over,
  });
  const list = (r?: ReplicationReport): string =>
    renderList(listView(now, [job()], [], { q: '', state: '', page: 1, per: 100 }), store, r);

  it('says what replication cannot promise in a banner: a standby, asynchronous standbys; nothing otherwise', () => {
    expect(list(replication({ mode: 'standby' }))).toMatch(
      /<div class="banner banner-critical" role="alert" id="replication">\s*<strong>Replication: standby, timeline 1<\/strong>\s*<p>connected to a standby/,
    );
    expect(list(replication({ mode: 'asynchronous', standbys: 2 }))).toMatch(
      /banner-warning[\s\S]*Replication: primary, 2 asynchronous standby\(s\)[\s\S]*a failover can lose/,
    );
    for (const r of [
      undefined,
      replication({}),
      replication({ mode: 'synchronous', synchronousStandbys: 1, standbys: 1 }),
      replication({ mode: 'embedded' }),
    ])
      expect(list(r)).not.toContain('class="banner');
  });

  it('a job with earlier due occurrences not completed: the count beside the state, and each listed (escaped) on its page', () => {
    const hostile = '<b>2026-11-30</b>';
    const j = job({
      name: 'nightly',
      notCompletedCount: 2,
      notCompleted: [
        {
          window: hostile,
          scheduledAt: new Date('2026-11-30T03:00:00Z'),
          overdueSince: new Date('2026-11-30T04:00:00Z'),
          outcome: 'failed',
        },
        {
          window: '2026-12-01T03:00:00Z',
          scheduledAt: new Date('2026-12-01T03:00:00Z'),
          overdueSince: new Date('2026-12-01T04:00:00Z'),
          outcome: 'no run',
        },
      ],
    });
    const html = renderList(listView(now, [j], [], { q: '', state: '', page: 1, per: 100 }), store);
    expect(html).toContain(
      '<span class="state state-overdue">overdue</span><div class="not-completed">2 due occurrences not completed, the oldest <code>&lt;b&gt;2026-11-30&lt;/b&gt;</code>',
    );
    const page = renderJob({
      dbNow: now,
      job: j,
      state: stateOf(j),
      nextDue: null,
      windows: [],
      events: [],
      eventLimit: 200,
      outputs: [],
      prunedThroughSeq: 0,
    });
    const table = page.slice(page.indexOf('<table class="cards" id="not-completed">'));
    expect(table).toMatch(
      /<code>&lt;b&gt;2026-11-30&lt;\/b&gt;<\/code>[\s\S]*failed[\s\S]*<code>2026-12-01T03:00:00Z<\/code>[\s\S]*no run/,
    );
    expect(page).not.toContain(hostile);
    const healthy = renderJob({
      dbNow: now,
      job: job(),
      state: 'healthy',
      nextDue: null,
      windows: [],
      events: [],
      eventLimit: 200,
      outputs: [],
      prunedThroughSeq: 0,
    });
    expect(healthy).not.toContain('id="not-completed"');
  });
});
