// The status page's grid aligned in time: the page's range cut into columns that are the same
// instants for every job shown (as Airflow's grid and healthchecks' last pings), each occurrence
// in the column of its scheduled time, the worst of a column shown; read for the whole page at once.
import type { JobState } from './job-states.js';
import { gridOf, type CellState, type GridCell } from './occurrence-grid.js';
import { OCCURRENCE_REASONS, readOccurrences, type Occurrence, type OccurrenceReason } from './occurrences.js';
import type { LeaseStore, RangeOccurrence } from '../store/contract.js';

/** The column widths a page can ask for (`every=`), narrowest first. */
export const GRID_STEPS = [
  { key: '1m', ms: 60_000 },
  { key: '5m', ms: 300_000 },
  { key: '15m', ms: 900_000 },
  { key: '1h', ms: 3_600_000 },
  { key: '3h', ms: 10_800_000 },
  { key: '1d', ms: 86_400_000 },
] as const;
export type StepKey = (typeof GRID_STEPS)[number]['key'];

/** Columns on the list (one line per job at desktop width, and a phone's) and on a job's page. */
export const LIST_COLUMNS = 24;
export const JOB_COLUMNS = 48;
/**
 * The most occurrences read per job and page: a job with more in the range (a minutely job in
 * hourly columns) shows its latest ones, and its older columns say they were not read.
 */
export const OCCURRENCES_PER_COLUMN = 8;

export interface TimeAxis {
  step: StepKey;
  stepMs: number;
  columns: number;
  /** The first column's start and the last one's end: whole steps on the epoch, the last holding now. */
  from: Date;
  to: Date;
  /** Chosen from the jobs shown, not asked for. */
  auto: boolean;
}

const DEFAULT_STEP: StepKey = '1h';

/**
 * The page's columns: the step asked for (`every=`), else the narrowest that is at least the
 * shortest interval among the jobs shown, so the most frequent of them has about one occurrence
 * per column (hourly for jobs without a schedule).
 */
export function timeAxis(now: Date, asked: string | null, intervals: Array<number | null>, columns: number): TimeAxis {
  const byKey = GRID_STEPS.find((s) => s.key === asked);
  let step = byKey ?? GRID_STEPS.find((s) => s.key === DEFAULT_STEP)!;
  if (!byKey) {
    const known = intervals.filter((i): i is number => i !== null && i > 0);
    if (known.length > 0) {
      const shortest = Math.min(...known);
      step = GRID_STEPS.find((s) => s.ms >= shortest) ?? GRID_STEPS[GRID_STEPS.length - 1]!;
    }
  }
  const end = Math.floor(now.getTime() / step.ms) * step.ms + step.ms;
  return {
    step: step.key,
    stepMs: step.ms,
    columns,
    from: new Date(end - columns * step.ms),
    to: new Date(end),
    auto: !byKey,
  };
}

/** Worst first: the state a column shows when several occurrences fall in it. */
const WORST_FIRST: readonly CellState[] = [
  'failed',
  'exhausted',
  'overdue',
  'missed',
  'retrying',
  'running',
  'replaced',
  'paused',
  'skipped',
  'completed',
];

/** One column of one job: the worst of its occurrences there, how many there are, or why it is empty. */
export interface Column {
  from: Date;
  /** The occurrence shown (the worst; `check`'s outlined ones first), undefined when none. */
  cell: GridCell | undefined;
  count: number;
  /** Empty: the job's next due tick falls in it. */
  next: boolean;
  /** Empty because older than what was read (more occurrences than OCCURRENCES_PER_COLUMN per column). */
  unread: boolean;
}

const worse = (a: GridCell, b: GridCell): boolean =>
  (a.overdue !== undefined) !== (b.overdue !== undefined)
    ? a.overdue !== undefined
    : WORST_FIRST.indexOf(a.state) < WORST_FIRST.indexOf(b.state);

/** A job's cells (oldest first) put in the axis's columns. `readFrom`: what was read starts there (a capped read). */
export function columnsOf(axis: TimeAxis, cells: GridCell[], next: Date | null, readFrom?: Date): Column[] {
  const cols: Column[] = Array.from({ length: axis.columns }, (_, i) => ({
    from: new Date(axis.from.getTime() + i * axis.stepMs),
    cell: undefined,
    count: 0,
    next: false,
    unread: false,
  }));
  const index = (d: Date): number => Math.floor((d.getTime() - axis.from.getTime()) / axis.stepMs);
  for (const c of cells) {
    if (!c.scheduledAt) continue;
    const col = cols[index(c.scheduledAt)];
    if (!col) continue;
    col.count++;
    if (!col.cell || worse(c, col.cell)) col.cell = c;
  }
  if (next) {
    const col = cols[index(next)];
    if (col && !col.cell) col.next = true;
  }
  if (readFrom)
    for (const col of cols) if (!col.cell && col.from.getTime() + axis.stepMs <= readFrom.getTime()) col.unread = true;
  return cols;
}

const asReason = (r: string): OccurrenceReason =>
  (OCCURRENCE_REASONS as readonly string[]).includes(r) ? (r as OccurrenceReason) : 'missed-other';

/**
 * Each job's cells within the axis: one read for the page when the store can
 * (readOccurrencesBetween), else each job as `history --by-occurrence` reads it. With the due
 * occurrences `check` reports (job-states.ts), as the job's own grid has them.
 */
export async function readTimeGrids(
  store: LeaseStore,
  jobs: readonly JobState[],
  axis: TimeAxis,
): Promise<Map<string, { cells: GridCell[]; readFrom: Date | undefined }>> {
  const perJob = axis.columns * OCCURRENCES_PER_COLUMN;
  const byJob = new Map<string, Occurrence[]>(jobs.map((j) => [j.name, []]));
  if (store.readOccurrencesBetween) {
    const rows = await store.readOccurrencesBetween(
      jobs.map((j) => j.name),
      axis.from,
      axis.to,
      perJob,
    );
    for (const r of rows) byJob.get(r.job)?.push(asOccurrence(r));
  } else {
    for (const j of jobs) byJob.set(j.name, await readOccurrences(store, j.name, perJob));
  }
  const out = new Map<string, { cells: GridCell[]; readFrom: Date | undefined }>();
  for (const j of jobs) {
    const occurrences = byJob.get(j.name) ?? [];
    const within = (c: GridCell): boolean =>
      c.scheduledAt !== null && c.scheduledAt >= axis.from && c.scheduledAt < axis.to;
    const cells = gridOf(j, occurrences, Number.MAX_SAFE_INTEGER).filter(within);
    // A capped read: its oldest occurrence is where what is known starts.
    const ledger = occurrences.filter((o) => o.scheduledAt !== null).map((o) => o.scheduledAt!.getTime());
    const readFrom = ledger.length >= perJob ? new Date(Math.min(...ledger)) : undefined;
    out.set(j.name, { cells, readFrom });
  }
  return out;
}

function asOccurrence(r: RangeOccurrence): Occurrence {
  return {
    window: r.window,
    scheduledAt: r.at,
    reason: asReason(r.reason),
    outcome: null,
    attempts: r.attempts,
    maxAttempts: r.maxAttempts,
    skips: {},
    endedAt: null,
    firstSeenAt: r.at,
  };
}
