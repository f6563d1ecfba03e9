// `leasejob status` as text: one line per job that fits the terminal (COLUMNS, else the
// terminal's width), its lists shortened with a count of what was left out; `--wide` gives every
// column in full. Each cell says in words what a bare `-` left to guess.
import type { JobState } from '../monitor/job-states.js';
import { leaseLeftText } from '../monitor/status-view.js';
import { humanMs, renderTable } from '../monitor/table.js';

/** One cell's renderings, the fullest first: the widest that fits its column is shown. */
type Cell = string[];

interface Column {
  header: string;
  cells: Cell[];
}

/** The width to fit: COLUMNS when it is a number, else the terminal's; undefined: no limit (a pipe, a file). */
export function outputWidth(
  env: NodeJS.ProcessEnv = process.env,
  stdout: { isTTY?: boolean; columns?: number } = process.stdout,
): number | undefined {
  const columns = Number(env.COLUMNS);
  if (env.COLUMNS && Number.isInteger(columns) && columns > 0) return columns;
  return stdout.isTTY && stdout.columns ? stdout.columns : undefined;
}

const host = (owner: string): string => owner.split(':').slice(0, 2).join(':');

function leaseCell(j: JobState): Cell {
  if (!j.holder) return [j.generation === null ? 'never held' : 'free'];
  if (j.holderGone) {
    const left = leaseLeftText(j);
    return [
      `held by ${j.holder}, ${left}`,
      `held by ${host(j.holder)}, ${left}`,
      `${host(j.holder)}, holder gone`,
      'holder gone',
    ];
  }
  const left = humanMs(j.expiresInMs);
  return [`held by ${j.holder}, ${left} left`, `held by ${host(j.holder)}, ${left} left`, `${host(j.holder)}`, 'held'];
}

/** The open windows, as many as fit, then `+N more`; at the least their count. */
function openCell(j: JobState): Cell {
  if (j.openCount === 0) return ['none'];
  const full = j.openWindows.map((w) => `${w.window}(${w.outcome}, attempt ${w.attempts})`);
  const keys = j.openWindows.map((w) => w.window);
  const cell: Cell = [];
  for (const items of [full, keys])
    for (let k = items.length; k >= 1; k--) {
      const more = j.openCount - k;
      cell.push(items.slice(0, k).join(' ') + (more > 0 ? ` +${more} more` : ''));
    }
  cell.push(`${j.openCount} open`);
  return cell;
}

/** The open windows read (the newest 10, the most failed one if older), then how many more: status --wide. */
function wideOpen(j: JobState): string {
  if (j.openCount === 0) return 'none';
  const more = j.openCount - j.openWindows.length;
  const listed = j.openWindows.map((w) => `${w.window}(${w.outcome}, attempt ${w.attempts})`).join(' ');
  return listed + (more > 0 ? ` (+${more} more)` : '');
}

/** Whether the latest due occurrence is done, with how many due ones are not (status --wide: DUE, NOT COMPLETED). */
function dueCell(j: JobState): Cell {
  if (j.paused) {
    const until = j.pause?.until ? ` until ${j.pause.until.toISOString()}` : '';
    return [`paused${until}`, 'paused'];
  }
  const n = j.notCompletedCount;
  const oldest = n > 0 ? ` (oldest ${j.notCompleted[0]!.window})` : '';
  if (j.overdue)
    return [`OVERDUE ${j.due?.window}, ${n} not completed${oldest}`, `OVERDUE, ${n} not completed`, 'OVERDUE'];
  if (!j.due) return [notJudged(j)];
  return n > 0
    ? [`on time, ${n} earlier not completed${oldest}`, `on time, ${n} earlier not completed`, 'on time']
    : ['on time'];
}

/** Why nothing is due: no schedule, no windows from it, or none due since the job was registered. */
function notJudged(j: JobState): string {
  if (typeof j.schedule !== 'string') return 'no schedule';
  return j.windowMode === 'schedule' ? 'not due yet' : 'no due windows';
}

function wideDue(j: JobState): string {
  if (j.paused) return dueCell(j)[0]!;
  if (j.overdue) return `OVERDUE ${j.due?.window}`;
  return j.due ? 'on time' : notJudged(j);
}

function wideNotCompleted(j: JobState): string {
  if (j.notCompletedCount > 0) return `${j.notCompletedCount} (oldest ${j.notCompleted[0]!.window})`;
  return j.due || j.windowMode === 'schedule' ? '0' : notJudged(j);
}

/** Every column, each cell in full: `status --wide`. */
function wideColumns(jobs: JobState[]): Column[] {
  const col = (header: string, cell: (j: JobState) => Cell): Column => ({ header, cells: jobs.map(cell) });
  return [
    col('JOB', (j) => [j.name]),
    col('HOLDER', (j) => [j.holder ?? (j.generation === null ? 'never held' : 'free')]),
    col('GEN', (j) => [j.generation ?? 'none']),
    col('EXPIRES IN', (j) => [j.held ? (j.holderGone ? leaseLeftText(j) : humanMs(j.expiresInMs)) : 'not held']),
    col('LAST COMPLETED WINDOW', (j) => [j.lastWindow ?? 'never']),
    col('COMPLETED AT', (j) => [j.lastCompletedAt ? j.lastCompletedAt.toISOString() : 'never']),
    col('OPEN WINDOWS', (j) => [wideOpen(j)]),
    col('DUE', (j) => [wideDue(j)]),
    col('NOT COMPLETED', (j) => [wideNotCompleted(j)]),
  ];
}

/** The columns a terminal shows, in the order they give way when the width is short. */
function defaultColumns(jobs: JobState[]): { columns: Column[]; giveWay: number[] } {
  const col = (header: string, cell: (j: JobState) => Cell): Column => ({ header, cells: jobs.map(cell) });
  const columns = [
    col('JOB', (j) => [j.name]),
    col('LEASE', leaseCell),
    col('LAST COMPLETED', (j) => [j.lastWindow ?? 'never']),
    col('OPEN', openCell),
    col('DUE', dueCell),
  ];
  // Open windows first (a count stays), then the holder, then what is due (its word stays).
  return { columns, giveWay: [3, 1, 4] };
}

/** The fullest rendering of `cell` within `width`, else its shortest. */
const fit = (cell: Cell, width: number): string => cell.find((v) => v.length <= width) ?? cell.at(-1)!;

const columnWidth = (c: Column, width: number): number =>
  Math.max(c.header.length, ...c.cells.map((cell) => fit(cell, width).length));

/**
 * Each column's width: in full when that fits `width`, else the columns of `giveWay` narrowed in
 * turn to their next shorter renderings until the line fits (or none is left to narrow).
 */
function fitWidths(columns: Column[], giveWay: number[], width: number | undefined): number[] {
  const widths = columns.map((c) => columnWidth(c, Infinity));
  const total = (): number => widths.reduce((a, b) => a + b, 0) + 2 * (widths.length - 1);
  if (width === undefined) return widths;
  for (const i of giveWay) {
    const c = columns[i]!;
    const steps = [...new Set(c.cells.flat().map((v) => v.length))].sort((a, b) => b - a);
    for (const step of steps) {
      if (total() <= width) return widths;
      if (step < widths[i]!) widths[i] = columnWidth(c, step);
    }
  }
  return widths;
}

/** Names cut with `…` when nothing else gave way enough (never below 8 characters). */
function cutNames(column: Column, widths: number[], width: number): void {
  const over = widths.reduce((a, b) => a + b, 0) + 2 * (widths.length - 1) - width;
  if (over <= 0) return;
  const to = Math.max(8, widths[0]! - over);
  column.cells = column.cells.map(([name]) => [name!.length > to ? name!.slice(0, to - 1) + '…' : name!]);
  widths[0] = columnWidth(column, to);
}

/** The status table: fitted to `width` (undefined: no limit), or every column in full with `wide`. */
export function renderStatusTable(jobs: JobState[], opts: { width?: number | undefined; wide?: boolean }): string {
  if (opts.wide) {
    const columns = wideColumns(jobs);
    return renderTable(
      columns.map((c) => c.header),
      jobs.map((_, r) => columns.map((c) => c.cells[r]![0]!)),
    );
  }
  const { columns, giveWay } = defaultColumns(jobs);
  const widths = fitWidths(columns, giveWay, opts.width);
  if (opts.width !== undefined) cutNames(columns[0]!, widths, opts.width);
  return renderTable(
    columns.map((c) => c.header),
    jobs.map((_, r) => columns.map((c, i) => fit(c.cells[r]!, widths[i]!))),
  );
}
