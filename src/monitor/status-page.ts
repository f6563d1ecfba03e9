// The status page's HTML: the job list and a job's own page, rendered on the server with an
// inline style sheet and no script, every value through markup`` (status-html.ts).
import { markup, trusted, type SafeHtml } from './status-html.js';
import type { JobState } from './job-states.js';
import {
  DEFAULT_PER_PAGE,
  JOB_STATES,
  STATE_LABEL,
  STATE_MEANING,
  leaseLeftText,
  type JobStateName,
  type ListQuery,
  type ListView,
} from './status-view.js';
import type { HistoryEvent, HostClock, WindowOutput, WindowRow } from '../store/contract.js';
import { replicationProblems, replicationSummary, type ReplicationReport } from '../replication.js';
import { humanMs } from './table.js';
import {
  axisRow,
  axisText,
  durationChart,
  durationText,
  GRID_STYLE,
  legend,
  timeStrip,
  occurrenceBody,
  type OccurrencePageData,
} from './status-grid.js';
import { ago, inZone, iso, pageZone, preciseIso, shortIso, when, zoned } from './status-time.js';
import { GRID_STEPS, type Column, type TimeAxis } from './time-grid.js';

const STYLE = trusted(`
:root{color-scheme:light dark;--bg:#fff;--fg:#1b1f24;--muted:#5a6270;--line:#d8dde3;--head:#f3f5f7;--link:#0b57d0;--on:#fff;
--overdue:#b3261e;--failing:#c62828;--exhausted:#6d0f0b;--missed:#795548;--never-ran:#d84315;--running-late:#9a6700;
--running:#0b57d0;--paused:#6b5b95;--healthy:#1e7d32}
@media (prefers-color-scheme:dark){:root{--bg:#15181c;--fg:#e6e8eb;--muted:#9aa3ad;--line:#30363d;--head:#1f2429;--link:#8ab4f8;
--on:#15181c;--overdue:#f28b82;--failing:#f28b82;--exhausted:#ff8a80;--missed:#bcaaa4;--never-ran:#ffab40;--running-late:#fbbc04;
--running:#8ab4f8;--paused:#c5b3e6;--healthy:#81c995}}
*{box-sizing:border-box}
body{margin:0;padding:.75rem 1rem;font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:var(--bg);color:var(--fg)}
a{color:var(--link)}
h1{font-size:1.2rem;margin:0}h2{font-size:1.1rem;margin:1.5rem 0 .5rem}
header.top{display:flex;flex-wrap:wrap;align-items:baseline;gap:.2rem 1rem;margin:0 0 .5rem}
.meta,.muted{color:var(--muted)}.meta{margin:0;font-size:.85rem}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em;overflow-wrap:anywhere}
.bar{display:flex;flex-wrap:wrap;align-items:center;gap:.4rem 1rem;margin:0 0 .5rem}
.summary{display:flex;flex-wrap:wrap;gap:.3rem;margin:0;padding:0;list-style:none}
.summary a{display:inline-flex;align-items:center;gap:.3rem;padding:.1rem .55rem;border:1px solid var(--line);border-radius:1rem;
text-decoration:none;color:var(--fg);font-size:.85rem}
.summary a[aria-current]{border-color:var(--fg);font-weight:700;box-shadow:inset 0 0 0 1px var(--fg)}
.summary .dot{width:.65rem;height:.65rem;border-radius:50%;background:var(--s,var(--muted))}
.summary .n{font-weight:700}
form.search{display:flex;flex-wrap:wrap;gap:.4rem;margin:0;flex:1 1 20rem}
form.search input[type=search]{flex:1 1 10rem;min-width:0;padding:.3rem .5rem;font:inherit;border:1px solid var(--line);
border-radius:.35rem;background:var(--bg);color:var(--fg)}
form.search select,form.search button{padding:.3rem .5rem;font:inherit;border:1px solid var(--line);border-radius:.35rem;
background:var(--head);color:var(--fg)}
.steps{font-size:.85rem}.steps a[aria-current]{font-weight:700;color:var(--fg)}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;vertical-align:top;padding:.4rem .5rem;border-bottom:1px solid var(--line)}
th{background:var(--head);font-weight:600;font-size:.85rem}
table.jobs{table-layout:fixed}
table.jobs th,table.jobs td{padding:.2rem .4rem;vertical-align:middle;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
table.jobs th{font-size:.75rem;vertical-align:bottom}
table.jobs col.k-job{width:15rem}table.jobs col.k-state{width:8.2rem}table.jobs col.k-sched{width:9rem}
table.jobs col.k-last{width:6rem}table.jobs col.k-next{width:5.5rem}table.jobs col.k-grid{width:22rem}
table.jobs td.strip{padding-top:.15rem;padding-bottom:.15rem}
.why .part+.part::before{content:" · ";color:var(--muted)}
.detail .part{display:block}
.state{display:inline-block;padding:.05rem .45rem;border-radius:.8rem;font-size:.72rem;font-weight:700;text-transform:uppercase;
letter-spacing:.03em;background:var(--s);color:var(--on);white-space:nowrap;line-height:1.35}
.s-failing{--s:var(--failing)}.s-exhausted{--s:var(--exhausted)}.s-missed{--s:var(--missed)}.s-never-ran{--s:var(--never-ran)}
.s-running-late{--s:var(--running-late)}.s-paused{--s:var(--paused)}.s-running{--s:var(--running)}.s-healthy{--s:var(--healthy)}
.state.s-healthy,.state.s-running,.state.s-paused{background:transparent;color:var(--s);border:1px solid currentColor;line-height:1.2}
.state-overdue{color:var(--overdue)}
.outcome-failed,.outcome-lost,.outcome-abandoned,.outcome-missed,.outcome-no-run,.outcome-exhausted{color:var(--failing);font-weight:600}
.banner{margin:0 0 1rem;padding:.6rem .8rem;border:1px solid currentColor;border-radius:.35rem}
.banner-critical{color:var(--overdue)}.banner-warning{color:var(--running-late)}.banner p{margin:.25rem 0 0;color:var(--fg)}
.pager{display:flex;gap:1rem;align-items:center;margin:1rem 0}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem;margin:0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;overflow-wrap:anywhere}
.scroll{overflow-x:auto}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0}
h3{font-size:1rem;margin:1rem 0 .25rem}
pre.tail{padding:.5rem;border:1px solid var(--line);border-radius:.35rem;background:var(--head);max-height:30rem;overflow:auto}
.axis.phone-axis{display:none}
@media (max-width:700px){
 body{padding:.5rem}
 table.cards thead{display:none}
 table.cards,table.cards tbody,table.cards tr,table.cards td{display:block;width:100%}
 table.cards tr{border:1px solid var(--line);border-radius:.5rem;margin:0 0 .6rem;padding:.3rem .2rem}
 table.cards td{border:0;padding:.2rem .5rem;overflow-wrap:anywhere}
 table.cards td[data-label]::before{content:attr(data-label);display:block;font-size:.75rem;color:var(--muted)}
 table.jobs colgroup,table.jobs thead{display:none}
 table.jobs,table.jobs tbody{display:block;width:100%}
 table.jobs tr{display:grid;grid-template-columns:minmax(0,1fr) max-content;gap:0 .4rem;padding:.3rem 0;border-bottom:1px solid var(--line)}
 table.jobs td{display:block;border:0;padding:0}
 table.jobs td.sched,table.jobs td.last,table.jobs td.next{display:none}
 table.jobs td.name{grid-column:1;font-weight:600}table.jobs td.st{grid-column:2;text-align:right}
 table.jobs td.why{grid-column:1/3;font-size:.8rem;color:var(--muted)}
 table.jobs td.strip{grid-column:1/3}
 .axis.phone-axis{display:grid;margin-top:1px}
 dl.facts{grid-template-columns:1fr}dl.facts dd{margin:0 0 .4rem}
}${GRID_STYLE}`);

function page(title: string, body: SafeHtml): string {
  return markup`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<link rel="icon" href="data:,">
<title>${title}</title>
<style>${STYLE}</style>
</head>
<body>
${body}
</body>
</html>
`.text;
}

function stateBadge(state: JobStateName): SafeHtml {
  return markup`<span class="${`state s-${state}`}" title="${STATE_MEANING[state]}">${STATE_LABEL[state]}</span>`;
}

const jobHref = (name: string): string => zoned(`/job?name=${encodeURIComponent(name)}`);

function listHref(q: ListQuery, change: Partial<ListQuery>): string {
  const next = { ...q, ...change };
  const p = new URLSearchParams();
  if (next.q) p.set('q', next.q);
  if (next.state) p.set('state', next.state);
  if (next.page > 1) p.set('page', String(next.page));
  if (next.per !== DEFAULT_PER_PAGE) p.set('per', String(next.per));
  if (next.every) p.set('every', next.every);
  const s = p.toString();
  return zoned(s ? `/?${s}` : '/');
}

function scheduleCell(j: JobState): SafeHtml {
  if (!j.schedule) return markup`<span class="muted">no schedule</span>`;
  return markup`<code>${j.schedule}</code> <span class="muted">${j.tz ?? 'UTC'}</span>`;
}

function openWindowsCell(j: JobState): SafeHtml {
  if (j.openCount === 0) return markup`<span class="muted">none</span>`;
  const more = j.openCount - j.openWindows.length;
  return markup`${j.openWindows.map(
    (w, i) =>
      markup`${i ? ', ' : ''}<code>${w.window}</code> <span class="outcome-${
        w.outcome
      }">${w.outcome}</span> ×${w.attempts}`,
  )}${more > 0 ? markup` <span class="muted">(+${more} more)</span>` : ''}`;
}

/** A pause: since when, until when, by whom, why. */
function pauseText(p: NonNullable<JobState['pause']>, now: Date, at: Instant = when): SafeHtml {
  return markup`paused ${at(p.since, now)}${p.until ? markup`, until ${at(p.until, now)}` : ', until resumed'}${
    p.by ? markup` by <code>${p.by}</code>` : ''
  }${p.reason ? markup`: ${p.reason}` : ''}`;
}

/** `3 due occurrences not completed`: the count within the lookback, the latest included (as status and the metric count). */
const notCompletedText = (n: number): string => `${n} due ${n === 1 ? 'occurrence' : 'occurrences'} not completed`;

type Instant = (d: Date | null | undefined, now: Date) => SafeHtml;

/**
 * What stands beside the state: the overdue window and its outcome, the earlier ones not
 * completed, the failed open windows, the holder, the pause, a run outside --expect-duration.
 * One line on the list (`ago`: relative instants), a line each on the job's page.
 */
function stateDetail(j: JobState, now: Date, at: Instant = when): SafeHtml {
  const parts: SafeHtml[] = [];
  const due = j.overdue && j.due ? j.notCompleted.find((o) => o.window === j.due!.window) : undefined;
  if (j.overdue && j.due)
    parts.push(
      markup`<span class="part">window <code>${j.due.window}</code>${
        due ? markup` (<span class="outcome-${due.outcome.replace(' ', '-')}">${due.outcome}</span>)` : ''
      } overdue since ${at(j.due.overdueSince, now)}</span>`,
    );
  // Earlier occurrences than the latest (which the part above names): a failed night, a minute
  // no host ran, still not completed although a later one is.
  const oldest = j.notCompleted[0];
  if (oldest && j.notCompletedCount > (j.overdue ? 1 : 0))
    parts.push(
      markup`<span class="part not-completed">${notCompletedText(j.notCompletedCount)}, the oldest <code>${
        oldest.window
      }</code> (<span class="outcome-${oldest.outcome.replace(' ', '-')}">${oldest.outcome}</span>) overdue since ${at(
        oldest.overdueSince,
        now,
      )}</span>`,
    );
  const failed = j.openWindows.filter((w) => ['failed', 'lost', 'abandoned', 'exhausted'].includes(w.outcome));
  for (const w of failed.slice(-2).reverse())
    parts.push(
      markup`<span class="part">window <code>${w.window}</code> <span class="outcome-${w.outcome}">${w.outcome}</span>, ${
        w.attempts
      } ${w.attempts === 1 ? 'attempt' : 'attempts'}${w.maxAttempts ? ` of ${w.maxAttempts}` : ''}</span>`,
    );
  if (j.held)
    parts.push(
      markup`<span class="part">running on <code>${j.holder}</code> (generation ${j.generation}, for ${humanMs(
        j.heldForMs ?? 0,
      )}, ${leaseLeftText(j)})</span>`,
    );
  if (j.paused && j.pause) parts.push(markup`<span class="part">${pauseText(j.pause, now, at)}</span>`);
  if (j.durationUnexpected) parts.push(markup`<span class="part">${j.durationUnexpected}</span>`);
  if (j.recentJobChanges > 0)
    parts.push(
      markup`<span class="part">settings changed ${j.recentJobChanges}× lately: do its hosts agree? (job-changed events)</span>`,
    );
  return markup`${parts}`;
}

/**
 * What the database can promise across a failover, when it is worth a person's attention (a
 * standby, asynchronous replication, synchronous without a standby in sync): what `check` says.
 */
function replicationBanner(r: ReplicationReport | undefined): SafeHtml {
  const problems = r ? replicationProblems(r) : [];
  if (!r || problems.length === 0) return markup``;
  return markup`${problems.map(
    (
      p,
    ) => markup`<div class="banner banner-${p.severity}" role="${p.severity === 'critical' ? 'alert' : 'status'}" id="replication">
<strong>Replication: ${replicationSummary(r)}</strong>
<p>${p.message}</p>
</div>`,
  )}`;
}

/** The list's time grid: the page's columns, and each shown job's strip in them. */
export interface ListGrid {
  axis: TimeAxis;
  strips: ReadonlyMap<string, Column[]>;
}

export function renderList(
  v: ListView,
  store: { kind: string; location: string },
  replication?: ReplicationReport,
  grid?: ListGrid,
  tz?: string,
): string {
  return inZone(tz, () => listPage(v, store, replication, grid));
}

/** The chips: every state with its count, each a link to the list of those jobs (what the filter shows). */
function chips(v: ListView): SafeHtml {
  const q = v.query;
  const current = (s: JobStateName | ''): SafeHtml | '' => (q.state === s ? trusted(' aria-current="true"') : '');
  return markup`<ul class="summary" id="chips">
<li><a href="${listHref(q, { state: '', page: 1 })}"${current('')} data-state="">all <span class="n">${v.total}</span></a></li>
${JOB_STATES.map(
  (s) =>
    markup`<li><a class="${`s-${s}`}" href="${listHref(q, { state: s, page: 1 })}"${current(s)} data-state="${s}" title="${
      STATE_MEANING[s]
    }"><span class="dot"></span>${STATE_LABEL[s]} <span class="n">${v.counts[s]}</span></a></li>`,
)}
</ul>`;
}

/** The column widths a reader can pick (`every=`), the current one marked. */
function stepLinks(v: ListView, axis: TimeAxis): SafeHtml {
  return markup`<span class="steps">columns: ${GRID_STEPS.map(
    (st) =>
      markup`<a href="${listHref(v.query, { every: st.key })}"${
        st.key === axis.step ? trusted(' aria-current="true"') : ''
      }>${st.key}</a> `,
  )}${axis.auto ? markup`<span class="muted">(chosen for the jobs shown)</span>` : ''}</span>`;
}

function jobRow(
  j: JobState,
  state: JobStateName,
  nextDue: Date | null,
  now: Date,
  grid: ListGrid | undefined,
  text: AxisText | undefined,
): SafeHtml {
  const cols = grid?.strips.get(j.name);
  return markup`<tr data-job="${j.name}" data-state="${state}">
<td class="name" data-label="Job"><a href="${jobHref(j.name)}" title="${j.name}">${j.name}</a></td>
<td class="st" data-label="State">${stateBadge(state)}</td>
<td class="why" data-label="Why">${stateDetail(j, now, ago)}</td>
<td class="sched" data-label="Schedule">${scheduleCell(j)}</td>
<td class="last" data-label="Last completed"${j.lastWindow ? markup` title="${`window ${j.lastWindow}`}"` : ''}>${
    j.lastWindow ? ago(j.lastCompletedAt, now) : markup`<span class="muted">never</span>`
  }</td>
<td class="next" data-label="Next due">${ago(nextDue, now)}</td>
<td class="strip" data-label="Occurrences">${
    grid && cols && text
      ? markup`${timeStrip(j.name, cols, grid.axis, text)}${axisRow(grid.axis, text, ' phone-axis')}`
      : ''
  }</td>
</tr>`;
}

type AxisText = ReturnType<typeof axisText>;

function listPage(
  v: ListView,
  store: { kind: string; location: string },
  replication: ReplicationReport | undefined,
  grid: ListGrid | undefined,
): string {
  const q = v.query;
  const first = v.matched === 0 ? 0 : (q.page - 1) * q.per + 1;
  const last = Math.min(v.matched, q.page * q.per);
  const text = grid ? axisText(grid.axis) : undefined;
  const rows = v.items.map(({ job, state, nextDue }) => jobRow(job, state, nextDue, v.dbNow, grid, text));
  const body = markup`<header class="top">
<h1>leasejob status</h1>
<p class="meta">${v.total} ${v.total === 1 ? 'job' : 'jobs'} · ${store.kind} ${store.location} · database time <time datetime="${iso(
    v.dbNow,
  )}">${shortIso(v.dbNow)}</time> · times in ${pageZone()} · <a href="/metrics">metrics</a></p>
</header>
${replicationBanner(replication)}
<div class="bar">
${chips(v)}
<form class="search" method="get" action="/" role="search">
<input type="search" name="q" value="${q.q}" placeholder="Search job names" aria-label="Search job names">
<select name="state" aria-label="State"><option value="">any state</option>${JOB_STATES.map(
    (s) => markup`<option value="${s}"${q.state === s ? trusted(' selected') : ''}>${STATE_LABEL[s]}</option>`,
  )}</select>
${q.per !== DEFAULT_PER_PAGE ? markup`<input type="hidden" name="per" value="${q.per}">` : ''}
${q.every ? markup`<input type="hidden" name="every" value="${q.every}">` : ''}
<input type="text" name="tz" value="${pageZone() === 'UTC' ? '' : pageZone()}" placeholder="Time zone (UTC)"
aria-label="Time zone" class="tz">
<button type="submit">Search</button>
</form>
</div>
<div class="bar">
<span class="muted" id="shown">${
    v.matched === 0
      ? 'No job matches.'
      : `Jobs ${first}-${last} of ` + `${v.matched}${v.matched !== v.total ? ` matching (${v.total} in all)` : ''}`
  }</span>
${grid && v.items.length ? stepLinks(v, grid.axis) : ''}
</div>
${v.items.length ? legend() : ''}
${
  v.items.length
    ? markup`<table class="jobs" id="jobs">
<colgroup><col class="k-job"><col class="k-state"><col class="k-why"><col class="k-sched"><col class="k-last"><col class="k-next">
<col class="k-grid"></colgroup>
<thead><tr><th>Job</th><th>State</th><th>Why</th><th>Schedule</th><th>Completed</th><th>Next due</th>
<th class="strip">${grid && text ? axisRow(grid.axis, text) : 'Occurrences'}</th></tr></thead>
<tbody>
${rows}
</tbody>
</table>`
    : ''
}
${pager(v)}
${hostsTable(v.hosts)}`;
  return page('leasejob status', body);
}

function pager(v: ListView): SafeHtml {
  if (v.pages <= 1) return markup``;
  const q = v.query;
  return markup`<nav class="pager" aria-label="Pages">
${
  q.page > 1
    ? markup`<a rel="prev" href="${listHref(q, { page: q.page - 1 })}">← previous</a>`
    : markup`<span class="muted">← previous</span>`
}
<span>page ${q.page} of ${v.pages}</span>
${
  q.page < v.pages
    ? markup`<a rel="next" href="${listHref(q, { page: q.page + 1 })}">next →</a>`
    : markup`<span class="muted">next →</span>`
}
</nav>`;
}

/** Hosts shown at most: the ones furthest off first. */
const MAX_HOSTS = 200;

function hostsTable(hosts: HostClock[]): SafeHtml {
  if (hosts.length === 0) return markup`<h2>Host clocks</h2><p class="muted">No host has measured its clock yet.</p>`;
  return markup`<h2>Host clocks</h2>
<p class="muted">Database clock minus the host's wall clock, at the host's latest run; leases use the database clock,
crontab occurrences the host's.</p>
<div class="scroll"><table class="cards" id="hosts">
<thead><tr><th>Host</th><th>Offset</th><th>Uncertainty</th></tr></thead>
<tbody>
${hosts
  .slice(0, MAX_HOSTS)
  .map(
    (h) =>
      markup`<tr><td data-label="Host"><code>${h.host}</code></td><td data-label="Offset">${signedMs(
        h.offsetMs,
      )}</td><td data-label="Uncertainty">± ${h.uncertaintyMs} ms</td></tr>`,
  )}
</tbody>
</table></div>
${
  hosts.length > MAX_HOSTS
    ? markup`<p class="muted">${hosts.length - MAX_HOSTS} more hosts not shown (closest to the database clock).</p>`
    : ''
}`;
}

const signedMs = (ms: number): string => `${ms > 0 ? '+' : ''}${ms} ms`;

export interface JobPageData {
  dbNow: Date;
  job: JobState;
  state: JobStateName;
  nextDue: Date | null;
  /** From readJobWindows; undefined when the store cannot (its open windows are then shown). */
  windows: WindowRow[] | undefined;
  events: HistoryEvent[];
  /** How many events were asked for (the page offers more when that many came). */
  eventLimit: number;
  /** Recorded outputs (--record-output), newest first. */
  outputs: WindowOutput[];
  /** Events up to this seq were pruned (leasejob prune); 0: none. */
  prunedThroughSeq: number;
  /** The occurrence grid in time (time-grid.ts); none when not read. */
  grid?: { axis: TimeAxis; columns: Column[] } | undefined;
  /** The reader's zone (`?tz=`); undefined: UTC. */
  tz?: string | undefined;
}

/** The job's own strip, 48 columns, with its axis above (and the column widths to pick). */
function jobGrid(job: string, g: { axis: TimeAxis; columns: Column[] }): SafeHtml {
  const text = axisText(g.axis);
  const href = (every: string): string => zoned(`/job?name=${encodeURIComponent(job)}&every=${every}`);
  return markup`<div class="job-grid">${axisRow(g.axis, text)}${timeStrip(job, g.columns, g.axis, text)}</div>
<p class="steps">columns: ${GRID_STEPS.map(
    (st) =>
      markup`<a href="${href(st.key)}"${st.key === g.axis.step ? trusted(' aria-current="true"') : ''}>${st.key}</a> `,
  )}</p>`;
}

export function renderJob(d: JobPageData): string {
  return inZone(d.tz, () => jobPage(d));
}

function jobPage(d: JobPageData): string {
  const j = d.job;
  const now = d.dbNow;
  const fact = (label: string, value: SafeHtml | string | number): SafeHtml =>
    markup`<dt>${label}</dt><dd>${value}</dd>`;
  const body = markup`<p><a href="${zoned('/')}">← all jobs</a></p>
<h1 id="job-name">${j.name}</h1>
<p class="meta">${stateBadge(d.state)} · database time <time datetime="${iso(now)}">${shortIso(now)}</time> · times in ${pageZone()}</p>
<div class="detail">${stateDetail(j, now)}</div>
<h2>Occurrences</h2>
${legend()}
${d.grid ? jobGrid(j.name, d.grid) : markup`<p class="muted">Not read.</p>`}
<h2>Durations</h2>
${durationChart(j.name, d.windows, { minMs: j.expectMinMs, maxMs: j.expectMaxMs })}
<h2>Job</h2>
<dl class="facts">
${fact('Schedule', scheduleCell(j))}
${fact(
  'Window',
  markup`${j.windowMode ?? 'none'}${j.windowFormat ? markup`, format <code>${j.windowFormat}</code>` : ''}${
    j.windowOffset ? markup`, offset <code>${j.windowOffset}</code>` : ''
  }`,
)}
${fact('Alert after', j.alertAfterMs !== null ? humanMs(j.alertAfterMs) : 'half the interval, at most 1h')}
${fact(
  'Due window',
  j.due
    ? markup`<code>${j.due.window}</code> scheduled ${when(j.due.scheduledAt, now)}, ${
        j.due.completed
          ? 'completed'
          : markup`<strong class="state-overdue">not completed</strong>, overdue since ${when(j.due.overdueSince, now)}`
      }`
    : markup`<span class="muted">none</span>`,
)}
${fact('Next due', when(d.nextDue, now))}
${fact(
  'Last completed',
  j.lastWindow
    ? markup`<code>${j.lastWindow}</code> ${when(j.lastCompletedAt, now)}${
        j.lastDurationMs !== null ? markup`, took ${durationText(j.lastDurationMs)}` : ''
      }`
    : 'never',
)}
${fact(
  'Lease',
  j.generation === null
    ? 'never taken'
    : j.held
      ? markup`held by <code>${j.holder}</code>, generation ${
          j.generation
        }, ${leaseLeftText(j)}, held for ${humanMs(j.heldForMs)}`
      : markup`free (last owner <code>${j.owner}</code>, generation ${j.generation})`,
)}
${fact('Pause', j.pause ? markup`${j.paused ? '' : 'last '}${pauseText(j.pause, now)}` : 'never paused')}
${fact('Version', j.version)}
${fact('Registered', when(j.createdAt, now))}
</dl>
${notCompletedSection(d)}
${windowsSection(d)}
${outputsSection(d)}
${eventsSection(d)}`;
  return page(`${j.name} · leasejob`, body);
}

/** Every due occurrence within the lookback not completed: what `check` names, until each completes, leaves the lookback, or is marked. */
function notCompletedSection(d: JobPageData): SafeHtml {
  const j = d.job;
  if (j.notCompletedCount === 0) return markup``;
  const now = d.dbNow;
  const more = j.notCompletedCount - j.notCompleted.length;
  return markup`<h2>Due occurrences not completed</h2>
<p>${notCompletedText(j.notCompletedCount)} within the alert lookback, oldest first${
    more > 0 ? ` (${j.notCompleted.length} listed, the oldest and the latest; ${more} more between them)` : ''
  }. Each stays here until it completes (rerun it: <code>leasejob run --scheduled-time ...</code>), leaves the lookback,
or is marked (<code>leasejob mark</code>).</p>
<div class="scroll"><table class="cards" id="not-completed">
<thead><tr><th>Window</th><th>Outcome</th><th>Scheduled</th><th>Overdue since</th></tr></thead>
<tbody>
${j.notCompleted.map(
  (o) => markup`<tr>
<td data-label="Window"><code>${o.window}</code></td>
<td data-label="Outcome"><span class="outcome-${o.outcome.replace(' ', '-')}">${o.outcome}</span></td>
<td data-label="Scheduled">${when(o.scheduledAt, now)}</td>
<td data-label="Overdue since">${when(o.overdueSince, now)}</td>
</tr>`,
)}
</tbody>
</table></div>`;
}

function windowsSection(d: JobPageData): SafeHtml {
  const now = d.dbNow;
  if (d.windows === undefined) {
    return markup`<h2>Open windows</h2><p>${openWindowsCell(d.job)}</p>`;
  }
  if (d.windows.length === 0) return markup`<h2>Windows</h2><p class="muted">No window recorded.</p>`;
  // Recorded as running, but its generation no longer holds the lease: abandoned, as status reads it.
  const live = d.job.held ? d.job.generation : null;
  const outputIndex = new Map(d.outputs.map((o, i) => [o.window, i]));
  return markup`<h2>Windows</h2>
<p class="muted">Open windows first (newest started first), then the latest completed ones; ${d.job.openCount} open in all.</p>
<div class="scroll"><table class="cards" id="windows">
<thead><tr><th>Window</th><th>Outcome</th><th>Attempts</th><th>Generation</th><th>Owner</th><th>Started</th><th>Finished</th>
<th>Exit</th><th>Output</th></tr></thead>
<tbody>
${d.windows.map((w) => {
  const outcome = w.completedAt === null && w.outcome === 'running' && w.generation !== live ? 'abandoned' : w.outcome;
  return markup`<tr>
<td data-label="Window"><code>${w.window}</code></td>
<td data-label="Outcome"><span class="outcome-${outcome}">${outcome}</span></td>
<td data-label="Attempts">${w.attempts}</td>
<td data-label="Generation">${w.generation}</td>
<td data-label="Owner"><code>${w.owner}</code></td>
<td data-label="Started">${when(w.startedAt, now)}</td>
<td data-label="Finished">${when(w.completedAt ?? w.finishedAt, now)}</td>
<td data-label="Exit">${w.exitCode ?? '-'}</td>
<td data-label="Output">${outputIndex.has(w.window) ? markup`<a href="#output-${outputIndex.get(w.window)!}">output</a>` : '-'}</td>
</tr>`;
})}
</tbody>
</table></div>`;
}

/** Control characters other than newline and tab (a terminal's colours, a carriage return) shown as U+FFFD. */
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f]/g;

function outputsSection(d: JobPageData): SafeHtml {
  if (d.outputs.length === 0) return markup``;
  const now = d.dbNow;
  return markup`<h2>Recorded output</h2>
<p class="muted">The tail of each window's latest recorded attempt (--record-output), newest first. It may hold whatever
the command printed, secrets included.</p>
${d.outputs.map((o, i) => {
  const kept = o.tail.length < o.bytes ? `the last ${o.tail.length} of ${o.bytes} bytes` : `${o.bytes} bytes`;
  return markup`<section class="output" id="output-${i}">
<h3><code>${o.window}</code> <span class="outcome-${o.outcome}">${o.outcome}</span>, attempt ${o.attempt}, generation ${
    o.generation
  }${o.exitCode !== null ? `, exit ${o.exitCode}` : ''}</h3>
<p class="muted">recorded ${when(o.recordedAt, now)}, ${kept}</p>
<pre class="mono tail">${o.tail.toString('utf8').replace(CONTROL, '\uFFFD')}</pre>
</section>`;
})}`;
}

/** db_time minus host_time of one event: its host's offset plus the way to the database. */
function eventOffset(e: HistoryEvent): SafeHtml {
  const measured = typeof e.detail.offset_ms === 'number' ? e.detail.offset_ms : undefined;
  if (measured !== undefined) {
    const u = typeof e.detail.uncertainty_ms === 'number' ? e.detail.uncertainty_ms : undefined;
    return markup`${signedMs(measured)}${u !== undefined ? ` ± ${u}` : ''} <span class="muted">measured</span>`;
  }
  if (!e.hostTime) return markup`<span class="muted">-</span>`;
  return markup`${signedMs(e.dbTime.getTime() - e.hostTime.getTime())}`;
}

function eventsSection(d: JobPageData): SafeHtml {
  const name = d.job.name;
  const more = d.events.length >= d.eventLimit;
  return markup`<h2>Events</h2>
${
  d.prunedThroughSeq > 0
    ? markup`<p>Events 1-${d.prunedThroughSeq} were pruned (leasejob prune); kept from seq ${
        d.prunedThroughSeq + 1
      }.</p>`
    : ''
}
<p class="muted">${
    more || d.prunedThroughSeq > 0 ? `The latest ${d.events.length}, ` : `All ${d.events.length}, `
  }in sequence order (the order they happened in; clocks are shown, never used to order). Offset: database time minus host time.
${more ? markup` <a href="${`${jobHref(name)}&events=${Math.min(d.eventLimit * 5, 100_000)}`}">Show more</a>` : ''}</p>
${
  d.events.length
    ? markup`<div class="scroll"><table class="cards" id="events">
<thead><tr><th>Seq</th><th>Kind</th><th>Window</th><th>Gen</th><th>Owner</th><th>Database time</th><th>Host time</th>
<th>Offset</th><th>Detail</th></tr></thead>
<tbody>
${d.events.map(
  (e) => markup`<tr>
<td data-label="Seq" class="seq">${e.seq}</td>
<td data-label="Kind">${e.kind}</td>
<td data-label="Window">${e.window !== null ? markup`<code>${e.window}</code>` : '-'}</td>
<td data-label="Gen">${e.generation ?? '-'}</td>
<td data-label="Owner">${e.owner !== null ? markup`<code>${e.owner}</code>` : '-'}</td>
<td data-label="Database time" class="mono">${preciseIso(e.dbTime)}</td>
<td data-label="Host time" class="mono">${e.hostTime ? preciseIso(e.hostTime) : '-'}</td>
<td data-label="Offset">${eventOffset(e)}</td>
<td data-label="Detail">${Object.keys(e.detail).length ? markup`<pre class="mono">${JSON.stringify(e.detail)}</pre>` : ''}</td>
</tr>`,
)}
</tbody>
</table></div>`
    : ''
}`;
}

export function renderMessage(title: string, message: string): string {
  return page(`${title} · leasejob`, markup`<p><a href="/">← all jobs</a></p><h1>${title}</h1><p>${message}</p>`);
}

/** One occurrence's page: its state in the grid, its attempts, output and events, its trace id. */
export function renderOccurrence(d: OccurrencePageData, tz?: string): string {
  return inZone(tz, () => page(`${d.job} ${d.window} · leasejob`, occurrenceBody(d)));
}
