// `run --catch-up`: which earlier occurrences of the schedule a run takes on before its own,
// oldest first, and which it records as missed instead (past --catch-up-limit, --max-delay).
import type { SequencePlan, SequenceWindow } from './types.js';
import { windowPending, type LeaseStore } from '../store/contract.js';
import { windowsBetween, type RangeWindow, type WindowNaming } from '../schedule/window-range.js';

export interface CatchUpSettings {
  /** How far back from this occurrence earlier ones are looked for. */
  windowMs: number;
  /** At most this many earlier windows run; older ones beyond it are recorded as missed. */
  limit: number;
}

/** What catch-up finds before this occurrence (no writes). */
export interface CatchUpFindings {
  run: RangeWindow[];
  beyondLimit: RangeWindow[];
  tooOld: RangeWindow[];
}

/**
 * The most occurrences --catch-up may span (a minutely schedule and --catch-up 7d is about
 * 10,000): walking the schedule costs tens of microseconds an occurrence (up to 80 on a busy
 * host), and a run with --catch-up walks it once.
 */
export const MAX_CATCH_UP_TICKS = 20_000;

/** The windows before this occurrence within the catch-up window, oldest first, this run's own left out. */
export function earlierWindows(
  naming: WindowNaming,
  current: { key: string; scheduledAt: Date },
  settings: CatchUpSettings,
): RangeWindow[] {
  return windowsBetween(
    naming,
    {
      fromMs: current.scheduledAt.getTime() - settings.windowMs,
      toMs: current.scheduledAt.getTime(),
      includeFrom: true,
      includeTo: false,
    },
    { max: MAX_CATCH_UP_TICKS, maxTicks: MAX_CATCH_UP_TICKS },
  ).filter((w) => w.key !== current.key);
}

/**
 * The earlier windows inside the catch-up window that never completed: no row, failed, lost,
 * abandoned. Not those recorded missed, not those before the retention horizon (pruned), not
 * this run's own window, not occurrences from before the job was first registered (it was not
 * expected to run them). `dbNow` judges --max-delay.
 */
export async function findCatchUp(
  store: Pick<LeaseStore, 'readWindows'>,
  job: string,
  earlier: RangeWindow[],
  settings: CatchUpSettings,
  maxDelayMs: number | undefined,
  dbNow?: Date,
): Promise<CatchUpFindings> {
  const none: CatchUpFindings = { run: [], beyondLimit: [], tooOld: [] };
  if (earlier.length === 0) return none;
  const states = await store.readWindows!(
    job,
    earlier.map((w) => w.key),
  );
  if (states.registeredAt === undefined) return none;
  const registeredMs = states.registeredAt.getTime();
  const now = (dbNow ?? states.dbNow).getTime();
  const open = earlier.filter((w) => {
    if (w.scheduledAt.getTime() < registeredMs) return false;
    // Not "no row, so never ran": below the retention horizon the row may have been pruned.
    return windowPending(states, w).pending && states.windows.get(w.key)?.outcome !== 'missed';
  });
  // One pass (up to MAX_CATCH_UP_TICKS windows): older than --max-delay, or in time.
  const tooOld: RangeWindow[] = [];
  const inTime: RangeWindow[] = [];
  for (const w of open)
    (maxDelayMs !== undefined && now - w.scheduledAt.getTime() > maxDelayMs ? tooOld : inTime).push(w);
  // The newest are kept: closest to now, and what Kubernetes's controller would pick.
  const cut = Math.max(0, inTime.length - settings.limit);
  return { run: inTime.slice(cut), beyondLimit: inTime.slice(0, cut), tooOld };
}

export function isEmpty(f: CatchUpFindings): boolean {
  return f.run.length + f.beyondLimit.length + f.tooOld.length === 0;
}

/** The sequence a run with catch-up runs: the earlier windows, then its own. */
export function catchUpPlan(
  f: CatchUpFindings,
  current: SequenceWindow,
  settings: CatchUpSettings,
  maxDelayMs: number | undefined,
): SequencePlan {
  return {
    run: [
      ...f.run.map((w): SequenceWindow => ({
        key: w.key,
        scheduledAt: w.scheduledAt,
        rerun: false,
        maxDelayMs,
        role: 'catch-up',
      })),
      { ...current, role: 'current' },
    ],
    missed: [
      { reason: 'max-delay', windows: f.tooOld, fields: { maxDelayMs } },
      { reason: 'catch-up-limit', windows: f.beyondLimit, fields: { catchUpLimit: settings.limit } },
    ],
  };
}
