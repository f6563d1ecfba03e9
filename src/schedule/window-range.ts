// The schedule's occurrences in a range of time, as distinct window keys (catch-up, backfill).
import { DateTime, type Duration } from 'luxon';
import { windowKey } from './occurrence.js';
import { nextTick, type Schedule } from './cron.js';

/** How a job names its windows (the run flags --schedule, --tz, --window-format, --window-offset). */
export interface WindowNaming {
  schedule: Schedule;
  format?: string | undefined;
  offset?: Duration | undefined;
}

/** One window of the range: its key, and the latest occurrence of the range that has that key. */
export interface RangeWindow {
  key: string;
  scheduledAt: Date;
}

/** More distinct windows in the range than the caller allowed. */
export class TooManyWindows extends Error {
  constructor(readonly max: number) {
    super(`more than ${max} windows`);
  }
}

/**
 * The windows of the occurrences from `fromMs` to `toMs` (each end included or not), oldest
 * first. A --window-format coarser than the schedule gives one window for several
 * occurrences: counted once, dated by its latest occurrence in the range (its last chance to
 * run). Throws TooManyWindows past `max` windows, or past `maxTicks` occurrences walked.
 */
export function windowsBetween(
  naming: WindowNaming,
  range: { fromMs: number; toMs: number; includeFrom: boolean; includeTo: boolean },
  limits: { max: number; maxTicks: number },
): RangeWindow[] {
  const out: RangeWindow[] = [];
  let at = nextTick(naming.schedule, new Date(range.fromMs - (range.includeFrom ? 1 : 0)));
  for (let ticks = 0; ; ticks++) {
    const ms = at.toMillis();
    if (ms > range.toMs || (!range.includeTo && ms === range.toMs)) return out;
    if (ticks >= limits.maxTicks) throw new TooManyWindows(limits.max);
    const key = windowKey(at, { format: naming.format, offset: naming.offset });
    const last = out.at(-1);
    if (last?.key === key) last.scheduledAt = at.toJSDate();
    else {
      if (out.length >= limits.max) throw new TooManyWindows(limits.max);
      out.push({ key, scheduledAt: at.toJSDate() });
    }
    at = nextTick(naming.schedule, at.toJSDate());
  }
}

/** The longest stretch one window key is looked for (a yearly format's is a year). */
const MAX_WINDOW_SPAN_MS = 2 ** 36; // about 2.2 years

/**
 * The earliest instant whose window key is `atMs`'s: where a window of a coarse --window-format
 * (and --window-offset) in `tz` begins. Each key covers one unbroken stretch of time
 * (validateWindowFormat refuses formats whose keys recur), so it is found by stepping back in
 * doubling steps until the key changes, then halving to the millisecond: about 60 keys worked
 * out. Without a format every instant is its own window. `prune` aligns its horizon with it, so
 * that no tick after the horizon shares a key with a window pruned before it.
 */
export function windowStart(
  atMs: number,
  naming: { format?: string | undefined; offset?: Duration | undefined; tz: string },
): number {
  if (naming.format === undefined) return atMs;
  const key = (ms: number): string =>
    windowKey(DateTime.fromMillis(ms, { zone: naming.tz }), { format: naming.format, offset: naming.offset });
  const own = key(atMs);
  let hi = atMs;
  let step = 1_000;
  for (;;) {
    if (step > MAX_WINDOW_SPAN_MS) return atMs; // no start found: the horizon stays where it was
    if (key(atMs - step) !== own) break;
    hi = atMs - step;
    step *= 2;
  }
  let lo = atMs - step;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (key(mid) === own) hi = mid;
    else lo = mid;
  }
  return hi;
}
