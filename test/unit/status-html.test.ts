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
  it('names the cause: the worst outcome of what check reports and of the open windows; paused over all', () => {
    const failed = [{ window: 'w', attempts: 1, outcome: 'failed', generation: 1 }];
    const due = (outcome: string, window = 'w0') => ({
      window,
      scheduledAt: new Date(0),
      overdueSince: new Date(1000),
      outcome,
    });
    expect(stateOf(job({ held: true, openWindows: failed }))).toBe('failing');
    expect(stateOf(job({ openWindows: [{ window: 'w', attempts: 1, outcome: 'abandoned', generation: 1 }] }))).toBe(
      'failing',
    );
    expect(stateOf(job({ openWindows: [{ window: 'w', attempts: 2, outcome: 'exhausted', generation: 1 }] }))).toBe(
      'exhausted',
    );
    expect(
      stateOf(job({ held: true, openWindows: [{ window: 'w', attempts: 1, outcome: 'running', generation: 1 }] })),
    ).toBe('running');
    expect(stateOf(job({ paused: true, held: true, openWindows: failed }))).toBe('paused');
    // Each outcome of a due occurrence not completed, as check names it.
    for (const [outcome, state] of [
      ['failed', 'failing'],
      ['lost', 'failing'],
      ['abandoned', 'failing'],
      ['exhausted', 'exhausted'],
      ['missed', 'missed'],
      ['no run', 'never-ran'],
      ['running', 'running-late'],
    ])
      expect(stateOf(job({ held: true, notCompleted: [due(outcome)], notCompletedCount: 1 })), outcome).toBe(state);
    // The worst of several: a failed night beats a late run today.
    expect(
      stateOf(job({ held: true, notCompleted: [due('failed'), due('running', 'w1')], notCompletedCount: 2 })),
    ).toBe('failing');
    expect(stateOf(job({ notCompleted: [due('no run'), due('missed', 'w1')], notCompletedCount: 2 }))).toBe('missed');
    // Counted beyond the listed ones: never healthy.
    expect(stateOf(job({ notCompletedCount: 3 }))).toBe('never-ran');
    // Longer than --expect-duration's maximum while it runs: late too.
    expect(stateOf(job({ held: true, heldForMs: 5000, expectMaxMs: 1000 }))).toBe('running-late');
    // A missed open window check does not report: not a cause.
    expect(stateOf(job({ openWindows: [{ window: 'w', attempts: 1, outcome: 'missed', generation: 1 }] }))).toBe(
      'healthy',
    );
  });

  it('reads the query leniently: unknown states and out-of-range pages are clamped, not refused', () => {
    expect(parseListQuery(new URLSearchParams('q=%20abc%20&state=never-ran&page=3&per=50&every=15m'))).toEqual({
      q: 'abc',
      state: 'never-ran',
      page: 3,
      per: 50,
      every: '15m',
    });
    expect(parseListQuery(new URLSearchParams('state=<x>&page=-1&per=999999999&every=2w'))).toEqual({
      q: '',
      state: '',
      page: 1,
      per: 1000,
      every: '',
    });
    expect(parseListQuery(new URLSearchParams('page=abc&per=0'))).toMatchObject({ page: 1, per: 1 });
  });

  it('filters, counts every state, sorts worst first and pages; a page past the end shows the last', () => {
    const jobs = [
      job({ name: 'a' }),
      job({ name: 'b', notCompletedCount: 1 }),
      job({ name: 'c' }),
      job({ name: 'd', held: true }),
    ];
    const v = listView(new Date(0), jobs, [], { q: '', state: '', page: 9, per: 2, every: '' });
    expect(v.counts).toEqual({
      failing: 0,
      exhausted: 0,
      missed: 0,
      'never-ran': 1,
      'running-late': 0,
      paused: 0,
      running: 1,
      healthy: 2,
    });
    expect(v.pages).toBe(2);
    expect(v.query.page).toBe(2);
    expect(v.items.map((i) => i.job.name)).toEqual(['a', 'c']);
    expect(
      listView(new Date(0), jobs, [], { q: 'B', state: '', page: 1, per: 2, every: '' }).items.map((i) => i.job.name),
    ).toEqual(['b']);
    expect(listView(new Date(0), jobs, [], { q: '', state: 'healthy', page: 1, per: 10, every: '' }).matched).toBe(2);
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
    renderList(listView(now, [job()], [], { q: '', state: '', page: 1, per: 100, every: '' }), store, r);

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
    const html = renderList(listView(now, [j], [], { q: '', state: '', page: 1, per: 100, every: '' }), store);
    expect(html).toContain(
      '<span class="part not-completed">2 due occurrences not completed, the oldest <code>&lt;b&gt;2026-11-30&lt;/b&gt;</code>',
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
