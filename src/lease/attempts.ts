// An occurrence's attempts: what a run says when the attempt budget (run --max-attempts) or the
// backoff (--retry-delay) refuses its window, and whether a failed try is tried again inside the
// run (--retries). The decision itself is the store's, in the claiming transaction.
import type { Logger } from '../log.js';
import { DEFAULT_RETRY_DELAY_MS, jitteredBackoffMs } from '../schedule/backoff.js';
import type { AbortReason, RunOptions, RunResult } from './types.js';

const ALREADY_FAILED =
  'occurrence already failed (once per occurrence: no --retries or --max-attempts): skipped, command not started; ' +
  'run --rerun runs it again';

/**
 * The attempt budget refused the window (its exhausted-skip or backoff-skip event is recorded):
 * nothing to do now, so exit 0 as for a busy or done skip. The failure was said by the run
 * that failed; an exhausted occurrence is what check and the exporter report.
 */
export function budgetSkip<T>(
  log: Logger,
  opts: Pick<RunOptions, 'maxAttempts' | 'retryDelayMs'>,
  reason: 'exhausted' | 'backoff',
  row: { attempt: number | null; nextAt?: Date | null; expiresAt?: Date | null },
): RunResult<T> {
  const attempts = row.attempt ?? 0;
  const nextAt = reason === 'backoff' ? (row.nextAt ?? row.expiresAt ?? null) : null;
  if (reason === 'exhausted' && (opts.maxAttempts ?? 0) < 0) log.info({ attempts }, ALREADY_FAILED);
  else if (reason === 'exhausted')
    log.info(
      { attempts, maxAttempts: opts.maxAttempts },
      'occurrence exhausted (its --max-attempts are spent): skipped, command not started; run --rerun or leasejob mark closes it',
    );
  else
    log.info(
      { attempts, retryDelayMs: opts.retryDelayMs, nextAt },
      'last attempt failed within its backoff (--retry-delay): skipped, command not started; ' +
        `next attempt allowed from ${nextAt?.toISOString()}`,
    );
  return { status: 'skipped', reason, attempts, nextAt };
}

/** Why a failed try is not tried again, or undefined when it is (with the retries left). */
export function noRetry(
  opts: RunOptions,
  tries: number,
  ran: { ok: boolean; started: boolean; aborted: AbortReason | undefined },
): string | undefined {
  if (ran.ok) return 'completed';
  if ((opts.retries ?? 0) <= tries) return 'no retries left';
  if (!ran.started) return 'not started';
  // A lost lease or a signal ends the run; --max-runtime bounds each try, which is then retried.
  const kind = ran.aborted?.kind;
  if (kind !== undefined && kind !== 'max-runtime') return kind;
  if (opts.signal?.aborted) return 'cancelled';
  return undefined;
}

/** How long before retry number `retry` (1 for the first): the backoff after that many failed tries, jittered. */
export const retryWaitMs = (opts: RunOptions, retry: number): number =>
  jitteredBackoffMs(opts.retryDelayMs ?? DEFAULT_RETRY_DELAY_MS, retry);
