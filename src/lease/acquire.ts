// Acquiring: one acquire() (or taking up a lease an unanswered acquire of this run committed),
// bounded waits for its answer, and giving back the lease of an acquire whose answer was lost.
import { monoNow } from '../clock.js';
import type { Logger } from '../log.js';
import {
  ACQUIRE_LOCK_TIMEOUT_MS,
  type AcquireInput,
  type AcquireRow,
  type LeaseStore as Store,
} from '../store/contract.js';

/**
 * The longest an acquisition's answer is waited for (the stop point when sooner): a database
 * this slow is unavailable, and the next trigger tries again.
 */
export const ACQUIRE_ANSWER_LIMIT_MS = 30_000;
/**
 * With --on-busy wait, what the first acquisition may take past --wait-timeout: the timeout is
 * for waiting on a busy lease, and a database that takes 0.4 s to answer on a busy host (with
 * --wait-timeout 300ms) is slow, not unreachable. Later polls keep within the timeout.
 */
export const FIRST_ACQUIRE_MIN_MS = 2_000;

/** `p`'s value, or undefined as soon as `signal` aborts (`p` is then left to settle unobserved). */
export async function unlessAborted<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T | undefined> {
  if (!signal) return p;
  if (signal.aborted) {
    p.catch(() => {});
    return undefined;
  }
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<undefined>((resolve) => {
    onAbort = () => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  p.catch(() => {});
  try {
    return await Promise.race([p, aborted]);
  } finally {
    signal.removeEventListener('abort', onAbort!);
  }
}

/** How long giving back the lease of an unanswered acquire waits for its answer. */
export const ABANDON_ANSWER_MS = 1_000;
/**
 * Before giving back after an acquire given up on, the acquire's own lock wait
 * (ACQUIRE_LOCK_TIMEOUT_MS): it may still be running on the server (a timed-out statement is
 * not cancelled). Asked sooner, the give-back would find nothing and the acquire commit after it.
 */
export const GIVE_UP_SETTLE_MS = ACQUIRE_LOCK_TIMEOUT_MS;
/** After a signal: how long an acquire in flight may still settle, and the give-back may take. */
export const SIGNALLED_SETTLE_MS = 300;
export const SIGNALLED_ABANDON_MS = 600;

/**
 * acquire(); and when the lease turns out to be held by this very run, that lease, renewed
 * from now. That happens when an earlier acquire of this run committed but its answer never
 * came (timed out, then tried again while waiting): its generation is taken up, with the
 * attempt its window was claimed with, instead of being waited out as a stale owner's.
 */
export async function acquireOrAdopt(
  store: Store,
  i: AcquireInput,
  mayBeOurs: boolean,
): Promise<AcquireRow & { adopted?: true }> {
  const started = monoNow();
  const row = await store.acquire(i);
  if (
    !mayBeOurs ||
    !store.adopt ||
    (row.outcome !== 'busy' && row.outcome !== 'stale') ||
    row.holder !== i.owner ||
    row.holderGeneration === null
  )
    return row;
  let took;
  try {
    took = await store.adopt({
      job: i.job,
      owner: i.owner,
      generation: row.holderGeneration,
      window: i.window,
      ttlMs: i.ttlMs,
      lockTimeoutMs: ACQUIRE_LOCK_TIMEOUT_MS,
      answerTimeoutMs: Math.max(250, (i.answerTimeoutMs ?? ACQUIRE_ANSWER_LIMIT_MS) - (monoNow() - started)),
    });
  } catch (err) {
    // The lease row locked (a fenced transaction of ours still open): answered as busy, polled again.
    if ((err as { code?: unknown }).code === '55P03') return row;
    throw err;
  }
  // Expired in between: ours still, and taken over by the next acquire (no loss recorded).
  if (!took) return { ...row, outcome: 'stale', expiresAt: row.dbNow };
  return {
    ...row,
    outcome: 'acquired',
    generation: row.holderGeneration,
    attempt: took.attempt,
    dbNow: took.dbNow,
    adopted: true,
  };
}

/**
 * After an acquire left unanswered (given up on, or a signal meanwhile): give back the lease it
 * may have taken, so that the next run need not wait it out, nor count it lost. Best effort
 * and bounded: failing that, the lease expires by itself as before.
 */
export async function abandonUnanswered(
  store: Store,
  job: string,
  owner: string,
  log: Logger,
  answerTimeoutMs: number,
): Promise<void> {
  if (!store.abandon) return;
  try {
    const generation = await store.abandon(job, owner, new Date(), answerTimeoutMs);
    if (generation !== undefined) log.info({ generation }, 'released the lease of an acquire whose answer was lost');
  } catch (err) {
    log.debug({ err: (err as Error).message }, 'could not check for the lease of an unanswered acquire');
  }
}
