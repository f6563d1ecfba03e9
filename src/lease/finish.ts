// Finishing: recording a window's outcome (retried while the lease lasts), the evidence of a
// lost lease, the output tail, and the one rule that turns how a task ended into an exit code.
import { constants as osConstants } from 'node:os';
import { offsetIsLarge, sleep, type OffsetMeasurement } from '../clock.js';
import { ExitCode, LeasejobError } from '../errors.js';
import type { Logger } from '../log.js';
import { isTransient, type FinishInput, type LeaseStore as Store } from '../store/contract.js';
import type { AbortReason, RunOptions } from './types.js';
import { unlessAborted } from './acquire.js';

/**
 * A task stopped because the lease could not be kept counts as a lost lease, even when the
 * database answered again before the lease expired (the finish then found it still held, and
 * recorded no loss): the events, and so leasejob_leases_lost_total and the LeasejobLeaseLost
 * alert, say that a child was stopped. Recorded here only when the finish found the lease held
 * (else the finish recorded it, on every schema version: counted once), in the finish's shape;
 * the renewals that failed meanwhile, which could not be recorded while the database was away,
 * are recorded either way. Best effort, bounded, and cut short by a signal: the outcome is
 * recorded already.
 */
export async function recordLoss(
  store: Store,
  lease: { job: string; window: string | undefined; owner: string; generation: string },
  lostWhileHeld: AbortReason | undefined,
  failures: { count: number; lastError: string },
  answerTimeoutMs: number,
): Promise<void> {
  // One after the other, on the runner's one connection; the renewals' failures first, as they came.
  try {
    if (failures.count > 0) {
      await store.recordEvent({
        ...lease,
        kind: 'renew-failed',
        hostTime: new Date(),
        detail: { failures: failures.count, last_error: failures.lastError },
        answerTimeoutMs,
      });
    }
    if (lostWhileHeld !== undefined) {
      await store.recordEvent({
        ...lease,
        kind: 'lease-lost',
        hostTime: new Date(),
        detail: { outcome: 'failed', aborted: lostWhileHeld.kind },
        answerTimeoutMs,
      });
    }
  } catch {
    // Evidence only: the outcome is recorded already.
  }
}

/** The task's output kept with its window; a failure to is said, and changes nothing else. */
export async function recordOutput(
  store: Store,
  opts: RunOptions,
  window: string,
  generation: string,
  answerTimeoutMs: number,
  log: Logger,
): Promise<void> {
  const output = opts.output?.();
  if (output === undefined || !store.recordOutput) return;
  try {
    const recorded = await unlessAborted(
      store.recordOutput({
        job: opts.name,
        window,
        generation,
        tail: output.tail,
        bytes: output.bytes,
        answerTimeoutMs,
      }),
      opts.signal,
    );
    if (recorded) log.debug({ generation, bytes: output.bytes, kept: output.tail.length }, 'output recorded');
    else if (recorded === false)
      log.warn({ generation }, 'output not recorded: the window has been claimed by another run since');
  } catch (err) {
    log.warn({ err: (err as Error).message, generation }, 'could not record the output');
  }
}

/** How long recording the outcome may still take once leasejob was told to stop. */
export const FINISH_AFTER_SIGNAL_MS = 2_000;

/**
 * `p`, unless `signal` aborts and `graceMs` more pass first: then a timeout error (transient,
 * as the driver's own). `p` is left to settle unobserved.
 */
export async function withinAfterAbort<T>(p: Promise<T>, signal: AbortSignal | undefined, graceMs: number): Promise<T> {
  if (!signal) return p;
  p.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const late = new Promise<never>((_, reject) => {
    const arm = (): void => {
      timer = setTimeout(
        () =>
          reject(
            Object.assign(new Error(`no answer within ${graceMs} ms of the signal to stop`), { code: 'ETIMEDOUT' }),
          ),
        graceMs,
      );
    };
    if (signal.aborted) arm();
    else {
      onAbort = arm;
      signal.addEventListener('abort', onAbort, { once: true });
    }
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
    if (onAbort) signal.removeEventListener('abort', onAbort);
  }
}

/** Below this much lease left, a retry of finish could not reach the database in time. */
export const FINISH_RETRY_MIN_MS = 300;
/** How long the last answer to finish is waited for, once the lease may have expired. */
export const FINISH_TIMEOUT_MIN_MS = 5_000;

/**
 * finish() with retries after a transient error (the database restarting, a dropped
 * connection, a timeout) for as long as the lease may still be valid: a successful task's
 * outcome is worth recording instead of leaving its window to a rerun. Safe to repeat: a
 * retry of an attempt that committed finds the lease released by this generation and
 * answers held again (sql/004_finish_retry.sql). Past the lease, the database itself says
 * "not held", so a late retry cannot complete anything.
 */
export async function finishWithRetry(
  store: Pick<Store, 'finish' | 'isTransient'>,
  input: FinishInput,
  remainingMs: () => number,
  log: Logger,
  signal: AbortSignal | undefined,
): Promise<{ held: boolean; dbNow: Date }> {
  for (let tries = 1; ; tries += 1) {
    // While the lease lasts, an attempt waits for half of what is left: a connection gone
    // silent leaves time for a retry on a new one (a slow answer is still right: the
    // database decides whether the lease held when the statement began). Once too little is
    // left by our conservative reckoning, one last attempt waits FINISH_TIMEOUT_MIN_MS: the
    // database still decides (its lease may have a little left), and one that is only slow
    // tells whether an earlier attempt committed (then "held": the run succeeded) or not
    // ("not held": the lease ran out first).
    const leftNow = remainingMs();
    const last = leftNow < 2 * FINISH_RETRY_MIN_MS;
    try {
      // Once leasejob is told to stop (SIGTERM: a pod's grace period is running), an answer is
      // waited for FINISH_AFTER_SIGNAL_MS more at most, and nothing is retried.
      return await withinAfterAbort(
        store.finish({ ...input, answerTimeoutMs: last ? FINISH_TIMEOUT_MIN_MS : leftNow / 2 }),
        signal,
        FINISH_AFTER_SIGNAL_MS,
      );
    } catch (err) {
      if (last || signal?.aborted || !isTransient(store, err)) throw err;
      const left = remainingMs();
      const pauseMs = Math.max(0, Math.min(200 * tries, 1_000, left - FINISH_RETRY_MIN_MS));
      log.warn(
        { err: (err as Error).message, tries, remainingMs: Math.round(left) },
        left - pauseMs < 2 * FINISH_RETRY_MIN_MS
          ? 'could not record outcome yet; asking once more whether it was recorded'
          : 'could not record outcome yet; retrying while the lease lasts',
      );
      await sleep(pauseMs);
    }
  }
}

export function finishDetail(
  attempt: number,
  durationMs: number,
  aborted: string | undefined,
  offset: OffsetMeasurement | undefined,
): Record<string, unknown> {
  return {
    attempt,
    duration_ms: Math.round(durationMs),
    ...(aborted ? { aborted } : {}),
    // The schema keeps these as integer milliseconds: a host clock 25+ days off would not fit,
    // and finish() would fail after the child succeeded. Clamped; the log has the real figure.
    ...(offset
      ? {
          offset_ms: clampInt32(offset.offsetMs),
          uncertainty_ms: clampInt32(offset.uncertaintyMs),
          offset_large: offsetIsLarge(offset),
        }
      : {}),
  };
}

/**
 * The exit code of a run leasejob stopped, whatever its child then did (exited, trapped the
 * signal and exited 0, or was SIGKILLed after the grace): 128+N when leasejob was told to stop by
 * signal N (its AbortSignal's reason a signal name, as `leasejob run` gives it), 124 past
 * --max-runtime, 75 when the lease could not be kept or a later occurrence replaced the run
 * (--on-busy replace). Recorded in the ledger and the
 * window-failed event, and what `leasejob run` exits with, so the three always agree; the
 * child's own status is in the `child exited` log line. Undefined for a run not stopped.
 */
export function stoppedExitCode(aborted: AbortReason | undefined): number | undefined {
  switch (aborted?.kind) {
    case 'lease-lost':
    case 'deadline':
    case 'replaced':
    case 'not-due':
      return ExitCode.leaseLost;
    case 'max-runtime':
      return ExitCode.timeout;
    case 'cancelled': {
      const n = typeof aborted.reason === 'string' ? osConstants.signals[aborted.reason as NodeJS.Signals] : undefined;
      return n === undefined ? undefined : 128 + n;
    }
    default:
      return undefined;
  }
}

export function exitCodeOf(err: unknown): number | undefined {
  if (typeof err === 'object' && err !== null && 'childCode' in err)
    return Number((err as { childCode: unknown }).childCode);
  // A command that could not be started: 127 or 126, as a shell would report it.
  if (err instanceof LeasejobError && err.code === 'E_SPAWN') return err.exitCode;
  // The guard stopped answering and the child was stopped without it: 70, as leasejob exits.
  if (err instanceof LeasejobError && err.code === 'E_GUARD_LOST') return err.exitCode;
  return undefined;
}

export const INT32_MAX = 2 ** 31 - 1;
export function clampInt32(x: number): number {
  return Math.max(-INT32_MAX, Math.min(INT32_MAX, Math.round(x)));
}
