// The status page's occurrence grid: each of a job's latest occurrences in one state word, from the
// reads `history --by-occurrence` and the occurrence metrics make (occurrences.ts) and the
// due-window judgement `check` makes (job-states.ts), so the picture cannot disagree with them.
import type { JobState } from './job-states.js';
import { readOccurrences, type Occurrence, type OccurrenceReason } from './occurrences.js';
import type { LeaseStore } from '../store/contract.js';

/** The states a cell can show, in the legend's order. */
export const CELL_STATES = [
  'completed',
  'running',
  'retrying',
  'failed',
  'exhausted',
  'overdue',
  'missed',
  'skipped',
  'paused',
  'replaced',
] as const;
export type CellState = (typeof CELL_STATES)[number];

/** What each state means, for the legend (docs/status-page.md has the same list). */
export const CELL_MEANING: Record<CellState, string> = {
  completed: 'ran and succeeded (also caught up or backfilled)',
  running: 'a run holds it now',
  retrying: 'failed, with attempts of --max-attempts left: a later trigger retries it',
  failed: 'its last run failed, lost its lease or was abandoned (no --max-attempts)',
  exhausted: 'failed with its --max-attempts spent',
  overdue: 'due and past its grace, and no run has claimed it',
  missed: 'older than --max-delay or beyond --catch-up-limit when a run came',
  skipped: 'marked by hand, skipped as busy, or within --retry-delay',
  paused: 'a run found the job paused',
  replaced: 'stopped for a later occurrence (--on-busy replace)',
};

export interface GridCell {
  window: string;
  scheduledAt: Date | null;
  state: CellState;
  /** Due, past its grace and not final: what `check` reports (its outcome there). */
  overdue: string | undefined;
  attempts: number;
  maxAttempts: number | null;
  /** The reason `history --by-occurrence` gives it; `no run` for a due one nothing claimed. */
  reason: OccurrenceReason | 'no run';
}

/** A due occurrence `check` lists, older than the occurrences read: its state from `check`'s outcome. */
const NOT_COMPLETED_STATE: Record<string, CellState> = {
  'no run': 'overdue',
  running: 'running',
  exhausted: 'exhausted',
  missed: 'missed',
};

/** How many occurrences a job's grid shows. */
export const GRID_SIZE = 48;

/**
 * Each reason's state. A Record, so that a reason added to OCCURRENCE_REASONS fails to compile
 * here until it is given a state (rather than show as some other one). `running` and `failed`
 * are refined below.
 */
const REASON_STATE: Record<OccurrenceReason | 'no run', CellState> = {
  completed: 'completed',
  'caught-up': 'completed',
  backfilled: 'completed',
  running: 'running',
  failed: 'failed',
  exhausted: 'exhausted',
  'skipped-paused': 'paused',
  'skipped-marked': 'skipped',
  'skipped-busy': 'skipped',
  'skipped-replaced': 'replaced',
  'skipped-backoff': 'skipped',
  'missed-max-delay': 'missed',
  'missed-catch-up-limit': 'missed',
  'missed-other': 'missed',
  'no run': 'overdue',
};

/** One occurrence's state, from its reason, its attempts, and whether its owner is gone. */
export function cellStateOf(
  reason: OccurrenceReason | 'no run',
  o: { attempts: number; maxAttempts: number | null },
  abandoned: boolean,
): CellState {
  // Recorded running, its generation no longer holding the lease: as status reads it.
  if (reason === 'running' && abandoned) return 'failed';
  if (reason === 'failed' && o.maxAttempts !== null && o.attempts < o.maxAttempts) return 'retrying';
  return REASON_STATE[reason];
}

/**
 * The grid of one job: its latest occurrences (readOccurrences) and the due ones `check` lists
 * that no run claimed, oldest first, at most `size`.
 */
export function gridOf(job: JobState, occurrences: Occurrence[], size = GRID_SIZE): GridCell[] {
  const notCompleted = new Map(job.notCompleted.map((n) => [n.window, n]));
  const openOutcome = new Map(job.openWindows.map((w) => [w.window, w.outcome]));
  const cells: GridCell[] = occurrences.map((o) => ({
    window: o.window,
    scheduledAt: o.scheduledAt,
    state: cellStateOf(o.reason, o, (notCompleted.get(o.window)?.outcome ?? openOutcome.get(o.window)) === 'abandoned'),
    overdue: notCompleted.get(o.window)?.outcome,
    attempts: o.attempts,
    maxAttempts: o.maxAttempts,
    reason: o.reason,
  }));
  const seen = new Set(cells.map((c) => c.window));
  for (const n of job.notCompleted) {
    if (seen.has(n.window)) continue;
    cells.push({
      window: n.window,
      scheduledAt: n.scheduledAt,
      state: NOT_COMPLETED_STATE[n.outcome] ?? 'failed',
      overdue: n.outcome,
      attempts: 0,
      maxAttempts: null,
      reason: 'no run',
    });
  }
  const at = (c: GridCell): number => c.scheduledAt?.getTime() ?? Number.MAX_SAFE_INTEGER;
  return cells.sort((a, b) => at(a) - at(b) || a.window.localeCompare(b.window)).slice(-size);
}

/** Reads and builds the grid of `job` (its state already read by readJobStates). */
export async function readGrid(store: LeaseStore, job: JobState, size = GRID_SIZE): Promise<GridCell[]> {
  return gridOf(job, await readOccurrences(store, job.name, size), size);
}
