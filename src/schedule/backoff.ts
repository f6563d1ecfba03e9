// The backoff between attempts of one occurrence (run --retry-delay): exponential from the
// delay, capped, the same rule as the database's attempt_budget() (sql/functions/attempt_budget.sql).

/** --retries without --retry-delay: the first retry waits 5 to 10 seconds. */
export const DEFAULT_RETRY_DELAY_MS = 10_000;

/** The cap, as a multiple of --retry-delay: the fifth failure's backoff and every later one. */
export const BACKOFF_CAP_FACTOR = 16;

/** The backoff after the `attempts`-th failed attempt: delay * 2^(attempts-1), at most 16 delays. */
export function backoffMs(retryDelayMs: number, attempts: number): number {
  return Math.min(retryDelayMs * 2 ** Math.max(attempts - 1, 0), retryDelayMs * BACKOFF_CAP_FACTOR);
}

/**
 * With jitter, for retries inside one run: between half the backoff and all of it ("equal
 * jitter"), so runners that failed together do not retry together, while the k-th retry still
 * waits at least as long as the one before it (each range starts where the previous one ends).
 */
export function jitteredBackoffMs(retryDelayMs: number, attempts: number, random: () => number = Math.random): number {
  const b = backoffMs(retryDelayMs, attempts);
  return b / 2 + random() * (b / 2);
}
