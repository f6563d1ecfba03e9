// The status pages' pictures: a job's occurrences as a strip of coloured cells with a legend, the
// last runs' durations against --expect-duration as server-rendered SVG, and one occurrence's
// page (its attempts, hosts, tokens, exit codes, durations, output tail and trace id).
import { markup, type SafeHtml } from './status-html.js';
import { CELL_MEANING, CELL_STATES, type CellState, type GridCell } from './occurrence-grid.js';
import { columnLabel, columnSpan, shortIso, when, zoned } from './status-time.js';
import type { Column, TimeAxis } from './time-grid.js';
import { humanMs } from './table.js';
import type { HistoryEvent, WindowOutput, WindowRow } from '../store/contract.js';
import { attemptSpanId, occurrenceTraceId } from '../trace-context.js';
import { pageTraceLink } from './trace-link.js';

export const GRID_STYLE = `
.grid{display:flex;flex-wrap:wrap;gap:2px;margin:.2rem 0;padding:0;list-style:none}
.grid li{display:block}
.cell{display:block;width:.8rem;height:1.35rem;border-radius:2px;background:var(--c);text-decoration:none}
.cell.due{outline:2px solid var(--overdue);outline-offset:1px}
.cell:focus-visible,.cell:hover{outline:2px solid var(--fg);outline-offset:1px}
.c-completed{--c:#2e9d44}.c-running{--c:#0b57d0}.c-retrying{--c:#e8a317}.c-failed{--c:#c62828}.c-exhausted{--c:#6d0f0b}
.c-overdue{--c:repeating-linear-gradient(45deg,#ff6d00 0 3px,#ffd0a8 3px 6px)}.c-missed{--c:#8d6e63}.c-skipped{--c:#b0b7bf}
.c-paused{--c:#7e57c2}.c-replaced{--c:#00897b}.c-next{--c:transparent;border:1px dashed var(--muted)}
.legend{display:flex;flex-wrap:wrap;gap:.3rem 1rem;margin:.25rem 0 1rem;padding:0;list-style:none;font-size:.85rem}
.legend li{display:flex;align-items:center;gap:.35rem}.legend .cell{height:.9rem}
.cell-inline .cell{display:inline-block;vertical-align:middle}
form.search input.tz{flex:0 1 11rem;min-width:0;padding:.45rem .6rem;font:inherit;border:1px solid var(--line);border-radius:.35rem;
background:var(--bg);color:var(--fg)}
td.strip{min-width:12rem}
.tgrid{display:grid;gap:2px;margin:0;padding:0}.tgrid.cols-24{grid-template-columns:repeat(24,minmax(0,1fr))}
.tgrid.cols-48{grid-template-columns:repeat(48,minmax(0,1fr))}
.tgrid .cell{width:auto;height:1.1rem}
.c-none{--c:var(--head)}.c-unread{--c:repeating-linear-gradient(90deg,var(--line) 0 1px,transparent 1px 3px)}
.axis{display:grid;gap:2px;font-size:.7rem;line-height:1.1;color:var(--muted);white-space:nowrap}
.axis.cols-24{grid-template-columns:repeat(24,minmax(0,1fr))}.axis.cols-48{grid-template-columns:repeat(48,minmax(0,1fr))}
.axis span{grid-column:span 6;overflow:hidden;border-left:1px solid var(--line);padding-left:2px}
.axis.cols-48 span{grid-column:span 8}
.vh{position:absolute;width:1px;height:1px;overflow:hidden;clip-path:inset(50%);white-space:nowrap}
svg.chart{width:100%;max-width:48rem;height:auto;display:block}
svg.chart text{font:11px system-ui,sans-serif;fill:var(--muted)}
svg.chart .band{fill:var(--healthy);opacity:.15}svg.chart .bound{stroke:var(--healthy);stroke-dasharray:4 3}
svg.chart .bar{fill:var(--healthy)}svg.chart .bar.failed{fill:var(--overdue)}svg.chart .bar.outside{fill:var(--failing)}
svg.chart .axis{stroke:var(--line)}
`;

export const occurrenceHref = (job: string, window: string): string =>
  zoned(`/occurrence?name=${encodeURIComponent(job)}&window=${encodeURIComponent(window)}`);

function cellTitle(c: GridCell): string {
  const at = c.scheduledAt ? ` · ${shortIso(c.scheduledAt)}` : '';
  const count = c.maxAttempts !== null ? `${c.attempts}/${c.maxAttempts} attempts` : `${c.attempts} attempt(s)`;
  const tries = c.attempts > 0 ? ` · ${count}` : '';
  const due = c.overdue !== undefined ? ` · overdue (${c.overdue})` : '';
  return `${c.window} · ${c.state}${at}${tries}${due}`;
}

/** What each colour means; an outlined cell is one `check` reports as due and not completed. */
export function legend(): SafeHtml {
  return markup`<ul class="legend" id="legend">${CELL_STATES.map(
    (s: CellState) => markup`<li title="${CELL_MEANING[s]}"><span class="cell c-${s}"></span>${s}</li>`,
  )}<li title="due, past its grace and not completed: what check reports">
<span class="cell c-completed due"></span>outlined: check reports it</li>
<li><span class="cell c-next"></span>next due</li>
<li><span class="cell c-none"></span>no occurrence</li></ul>`;
}

/** A run's duration: milliseconds below a second (a quick job's runs would all read `0s`). */
export const durationText = (ms: number): string => (ms < 1000 ? `${Math.round(ms)} ms` : humanMs(ms));

/** The y-axis labels, the higher first: one closer than a line's height to a kept one is left out. */
function axisLabels(labels: Array<{ y: number; text: string }>, left: number): SafeHtml {
  const kept: Array<{ y: number; text: string }> = [];
  for (const l of labels) if (kept.every((k) => Math.abs(k.y - l.y) >= 12)) kept.push(l);
  return markup`${kept.map((l) => markup`<text x="${left - 4}" y="${(l.y + 4).toFixed(1)}" text-anchor="end">${l.text}</text>`)}`;
}

const CHART = { w: 600, h: 150, left: 52, right: 8, top: 10, bottom: 22 };

/**
 * The last runs' durations (started to finished, latest attempt of each window) as bars, with
 * --expect-duration's bounds as a band: a bar outside it is coloured as a warning.
 */
export function durationChart(
  job: string,
  windows: WindowRow[] | undefined,
  expect: { minMs: number | null; maxMs: number | null },
): SafeHtml {
  const runs = (windows ?? [])
    .filter((w) => w.finishedAt !== null && w.outcome !== 'missed' && w.outcome !== 'skipped')
    .map((w) => ({ w, ms: Math.max(0, w.finishedAt!.getTime() - w.startedAt.getTime()) }))
    .sort((a, b) => a.w.startedAt.getTime() - b.w.startedAt.getTime())
    .slice(-40);
  if (runs.length === 0) return markup`<p class="muted">No finished run yet.</p>`;
  const top = Math.max(...runs.map((r) => r.ms), expect.maxMs ?? 0, expect.minMs ?? 0, 1) * 1.1;
  const { w, h, left, right, top: pad, bottom } = CHART;
  const plotH = h - pad - bottom;
  const y = (ms: number): number => pad + plotH - (ms / top) * plotH;
  const slot = (w - left - right) / Math.max(runs.length, 10);
  const lo = expect.minMs ?? 0;
  const hi = expect.maxMs ?? top;
  const band =
    expect.minMs !== null || expect.maxMs !== null
      ? markup`<rect class="band" x="${left}" y="${y(hi).toFixed(1)}" width="${w - left - right}"
height="${(y(lo) - y(hi)).toFixed(1)}"></rect>
${[expect.minMs, expect.maxMs].map((b) =>
  b === null
    ? ''
    : markup`<line class="bound" x1="${left}" x2="${w - right}" y1="${y(b).toFixed(1)}" y2="${y(b).toFixed(1)}"></line>`,
)}`
      : '';
  const bars = runs.map(({ w: row, ms }, i) => {
    const outside = (expect.minMs !== null && ms < expect.minMs) || (expect.maxMs !== null && ms > expect.maxMs);
    const cls = `bar${row.outcome === 'completed' ? '' : ' failed'}${outside ? ' outside' : ''}`;
    const x = left + i * slot + slot * 0.15;
    return markup`<a href="${occurrenceHref(job, row.window)}"><rect class="${cls}" x="${x.toFixed(1)}" y="${y(ms).toFixed(1)}" width="${(
      slot * 0.7
    ).toFixed(
      1,
    )}" height="${Math.max(1, y(0) - y(ms)).toFixed(1)}"><title>${`${row.window} · ${durationText(ms)} · ${row.outcome}${
      outside ? ' · outside --expect-duration' : ''
    }`}</title></rect></a>`;
  });
  return markup`<svg class="chart" id="durations" viewBox="0 0 ${w} ${h}" role="img"
aria-label="${`Durations of the last ${runs.length} runs`}">
<line class="axis" x1="${left}" x2="${w - right}" y1="${y(0)}" y2="${y(0)}"></line>
${axisLabels(
  [
    { y: y(0), text: '0' },
    ...[expect.minMs, expect.maxMs].flatMap((b) => (b === null ? [] : [{ y: y(b), text: durationText(b) }])),
    { y: pad + 4, text: durationText(Math.round(top)) },
  ],
  left,
)}
${band}
${bars}
<text x="${left}" y="${h - 6}">oldest</text><text x="${w - right}" y="${h - 6}" text-anchor="end">latest</text>
</svg>
<p class="muted">The last ${runs.length} finished runs, started to finished (latest attempt of each window)${
    expect.minMs !== null || expect.maxMs !== null ? '; the band is --expect-duration' : '; no --expect-duration set'
  }. Bars link to their occurrence.</p>`;
}

/** The events that end an attempt, and the outcome each says. */
const END_KINDS: Record<string, string> = {
  'window-completed': 'completed',
  'window-failed': 'failed',
  'lease-lost': 'lost',
  'window-replaced': 'replaced',
};

export interface Attempt {
  attempt: number;
  generation: string;
  owner: string | null;
  host: string | null;
  startedAt: Date;
  endedAt: Date | null;
  outcome: string;
  exitCode: number | null;
  durationMs: number | null;
}

/** Each attempt of an occurrence from its events: a claim, and the end of the same generation and attempt. */
export function attemptsOf(events: HistoryEvent[]): Attempt[] {
  const attempts: Attempt[] = [];
  for (const e of events) {
    const n = Number(e.detail.attempt);
    if (e.kind === 'window-claimed' && e.generation !== null) {
      attempts.push({
        attempt: Number.isInteger(n) ? n : attempts.length + 1,
        generation: e.generation,
        owner: e.owner,
        host: e.host ?? null,
        startedAt: e.dbTime,
        endedAt: null,
        outcome: 'running',
        exitCode: null,
        durationMs: null,
      });
      continue;
    }
    const outcome = END_KINDS[e.kind];
    if (outcome === undefined) continue;
    const a = [...attempts]
      .reverse()
      .find((x) => x.generation === e.generation && x.endedAt === null && (!Number.isInteger(n) || x.attempt === n));
    if (!a) continue;
    a.endedAt = e.dbTime;
    a.outcome = outcome;
    a.exitCode = typeof e.detail.exit_code === 'number' ? e.detail.exit_code : null;
    a.durationMs =
      typeof e.detail.duration_ms === 'number' ? e.detail.duration_ms : e.dbTime.getTime() - a.startedAt.getTime();
  }
  return attempts;
}

export interface OccurrencePageData {
  dbNow: Date;
  job: string;
  window: string;
  /** Its cell in the job's grid; undefined when older than the grid. */
  cell: GridCell | undefined;
  events: HistoryEvent[];
  output: WindowOutput | undefined;
}

const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f]/g; // eslint-disable-line no-control-regex

/** The trace id, a link to the trace viewer when --trace-link-template names one (trace-link.ts). */
function traceIdHtml(traceId: string): SafeHtml {
  const link = pageTraceLink(traceId);
  const code = markup`<code id="trace-id">${traceId}</code>`;
  return link === undefined ? code : markup`<a href="${link}" rel="noopener noreferrer">${code}</a>`;
}

export function occurrenceBody(d: OccurrencePageData): SafeHtml {
  const now = d.dbNow;
  const traceId = occurrenceTraceId(d.job, d.window);
  const attempts = attemptsOf(d.events);
  const c = d.cell;
  return markup`<p><a href="${zoned(`/job?name=${encodeURIComponent(d.job)}`)}">← ${d.job}</a></p>
<h1 id="occurrence">${d.job} <code>${d.window}</code></h1>
<dl class="facts">
<dt>State</dt><dd>${
    c
      ? markup`<span class="cell-inline"><span class="${`cell c-${c.state}`}"></span>
<strong id="state">${c.state}</strong></span> <span class="muted">(${c.reason}${
          c.overdue !== undefined ? `; check reports it due and not completed: ${c.overdue}` : ''
        })</span>`
      : markup`<span class="muted">older than the job's grid</span>`
  }</dd>
<dt>Scheduled</dt><dd>${when(c?.scheduledAt ?? null, now)}</dd>
<dt>Trace id</dt><dd>${traceIdHtml(traceId)}
<span class="muted">(every attempt's TRACEPARENT, the webhook's trace_id)</span></dd>
</dl>
<h2>Attempts</h2>
${
  attempts.length === 0
    ? markup`<p class="muted">No run claimed this occurrence${d.events.length ? ' (see its events)' : ''}.</p>`
    : markup`<div class="scroll"><table class="cards" id="attempts">
<thead><tr><th>Attempt</th><th>Outcome</th><th>Host</th><th>Owner</th><th>Token</th><th>Started</th><th>Duration</th><th>Exit</th>
<th>Span id</th></tr></thead>
<tbody>
${attempts.map(
  (a) => markup`<tr>
<td data-label="Attempt">${a.attempt}</td>
<td data-label="Outcome"><span class="outcome-${a.outcome}">${a.outcome}</span></td>
<td data-label="Host"><code>${a.host ?? '-'}</code></td>
<td data-label="Owner"><code>${a.owner ?? '-'}</code></td>
<td data-label="Token">${a.generation}</td>
<td data-label="Started">${when(a.startedAt, now)}</td>
<td data-label="Duration">${a.durationMs !== null ? durationText(a.durationMs) : '-'}</td>
<td data-label="Exit">${a.exitCode ?? '-'}</td>
<td data-label="Span id"><code>${attemptSpanId(d.job, d.window, a.generation, a.attempt)}</code></td>
</tr>`,
)}
</tbody>
</table></div>`
}
${
  d.output
    ? markup`<h2>Output</h2>
<p class="muted">attempt ${d.output.attempt}, generation ${d.output.generation}, recorded ${when(d.output.recordedAt, now)}, ${
        d.output.tail.length < d.output.bytes
          ? `the last ${d.output.tail.length} of ${d.output.bytes} bytes`
          : `${d.output.bytes} bytes`
      }</p>
<pre class="mono tail" id="output">${d.output.tail.toString('utf8').replace(CONTROL, '\uFFFD')}</pre>`
    : ''
}
<h2>Events</h2>
${
  d.events.length
    ? markup`<div class="scroll"><table class="cards" id="occurrence-events">
<thead><tr><th>Seq</th><th>Kind</th><th>Gen</th><th>Host</th><th>Database time</th><th>Detail</th></tr></thead>
<tbody>
${d.events.map(
  (e) => markup`<tr><td data-label="Seq">${e.seq}</td><td data-label="Kind">${e.kind}</td><td data-label="Gen">${
    e.generation ?? '-'
  }</td><td data-label="Host"><code>${e.host ?? '-'}</code></td><td data-label="Database time">${when(e.dbTime, now)}</td>
<td data-label="Detail">${Object.keys(e.detail).length ? markup`<pre class="mono">${JSON.stringify(e.detail)}</pre>` : ''}</td></tr>`,
)}
</tbody></table></div>`
    : markup`<p class="muted">No event recorded for this occurrence.</p>`
}`;
}

/** Labels every this many columns (four on the list, six on a job's page). */
const labelEvery = (columns: number): number => (columns === 48 ? 8 : 6);

/** The time of each column once for the page: every job's strip has the same columns. */
export function axisText(axis: TimeAxis): { labels: string[]; spans: string[] } {
  const starts = Array.from({ length: axis.columns }, (_, i) => new Date(axis.from.getTime() + i * axis.stepMs));
  return {
    labels: starts.map((d) => columnLabel(d, axis.stepMs)),
    spans: starts.map((d) => columnSpan(d, axis.stepMs)),
  };
}

/** The axis: a label at the start of every few columns, aligned with the strips below (same grid). */
export function axisRow(axis: TimeAxis, text: { labels: string[] }, extra = ''): SafeHtml {
  const every = labelEvery(axis.columns);
  return markup`<div class="${`axis cols-${axis.columns}${extra}`}" aria-hidden="true">${text.labels
    .filter((_, i) => i % every === 0)
    .map((l) => markup`<span>${l}</span>`)}</div>`;
}

function columnTitle(c: Column, span: string): string {
  const cell = c.cell!;
  const more = c.count > 1 ? ` (worst of ${c.count})` : '';
  return `${span} · ${cell.state}${more} · ${cellTitle(cell)}`;
}

/**
 * One job's strip: a cell per column of the page's axis, the same instants for every job. A
 * cell with an occurrence links to it; its title and (visually hidden) text carry its time.
 */
export function timeStrip(job: string, cols: Column[], axis: TimeAxis, text: { spans: string[] }): SafeHtml {
  return markup`<div class="${`tgrid cols-${axis.columns}`}" role="group" aria-label="${`Occurrences of ${job}`}">${cols.map(
    (c, i) => {
      const span = text.spans[i]!;
      if (c.cell) {
        const cell = c.cell;
        return markup`<a class="${`cell c-${cell.state}${cell.overdue !== undefined ? ' due' : ''}`}" href="${occurrenceHref(
          job,
          cell.window,
        )}" title="${columnTitle(c, span)}" data-at="${c.from.toISOString()}" data-window="${
          cell.window
        }" data-state="${cell.state}"${
          cell.overdue !== undefined ? markup` data-overdue="${cell.overdue}"` : ''
        }><span class="vh">${span} ${cell.state}</span></a>`;
      }
      const [cls, what] = c.next
        ? ['c-next', 'next due']
        : c.unread
          ? ['c-unread', 'not read']
          : ['c-none', 'no occurrence'];
      const at = c.from.toISOString();
      return markup`<span class="${`cell ${cls}`}" title="${`${span} · ${what}`}" data-at="${at}"></span>`;
    },
  )}</div>`;
}
