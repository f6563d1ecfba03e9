// `run`'s occurrence policies: the attempt budget (--max-attempts), the retries inside one run
// (--retries, --retry-delay) and the backoff across triggers (--retry-delay), validated here.
import { UsageError } from '../errors.js';
import { parseDuration } from '../schedule/duration.js';

export interface AttemptPolicy {
  /**
   * Attempts an occurrence may have in all, across runs and hosts; undefined: no limit. Negative:
   * the default budget (defaultBudget below), -n attempts that failed, a lost one not counted.
   */
  maxAttempts?: number | undefined;
  /** Tries after the first inside this run, under the same lease (0: none). */
  retries: number;
  /** The backoff's base: given, it also spaces the attempts of separate triggers. */
  retryDelayMs?: number | undefined;
}

/** The most attempts a budget may allow, and the most retries one run may make. */
export const MAX_ATTEMPTS_LIMIT = 1_000;
export const MAX_RETRIES = 100;
/** A day: its backoff grows to 16 days, within Node's timer limit (24 days). */
export const MAX_RETRY_DELAY_MS = 86_400_000;

const count = (text: string, flag: string, min: number, max: number): number => {
  const n = /^\s*\d+\s*$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max)
    throw new UsageError(`Expected \`${flag}\` to be a whole number from ${min} to ${max}, got \`${text}\`.`);
  return n;
};

export function attemptPolicy(
  flags: { maxAttempts?: string; retries?: string; retryDelay?: string },
  hasWindow: boolean,
): AttemptPolicy {
  const maxAttempts =
    flags.maxAttempts !== undefined ? count(flags.maxAttempts, '--max-attempts', 1, MAX_ATTEMPTS_LIMIT) : undefined;
  const retries = flags.retries !== undefined ? count(flags.retries, '--retries', 0, MAX_RETRIES) : 0;
  const retryDelayMs = flags.retryDelay !== undefined ? parseDuration(flags.retryDelay, '--retry-delay') : undefined;
  if (retryDelayMs !== undefined && (retryDelayMs < 1 || retryDelayMs > MAX_RETRY_DELAY_MS))
    throw new UsageError(
      `Expected \`--retry-delay\` to be a positive duration of at most 1d (its backoff grows to 16 times it), got \`${flags.retryDelay}\`.`,
    );
  const given = [
    flags.maxAttempts !== undefined && '--max-attempts',
    flags.retries !== undefined && '--retries',
    flags.retryDelay !== undefined && '--retry-delay',
  ].filter((f): f is string => typeof f === 'string');
  // The budget and the backoff are an occurrence's: without a window there is none to count.
  if (given.length > 0 && !hasWindow)
    throw new UsageError(
      `\`${given.join('`, `')}\` ${given.length === 1 ? 'needs' : 'need'} a window: \`--window-from-schedule\` or \`--window\`.`,
    );
  return { maxAttempts, retries, retryDelayMs };
}

/**
 * `run`'s default budget, for an occurrence named by a crontab's clock or --scheduled-time with
 * no --max-attempts (nor --retry-delay without --retries): once per occurrence across every host (with
 * --retries r, the r + 1 tries of one run), so that a failure runs and mails once, not once per
 * host whose trigger comes after it. An attempt lost to a crash or a lost lease does not count:
 * a later trigger resumes it. Not for an occurrence from a Kubernetes Job's name: a new pod of
 * the same Job is the Job's own retry (backoffLimit), which must still run it.
 */
export function defaultBudget(
  policy: AttemptPolicy,
  flags: { maxAttempts?: string; retryDelay?: string; rerun?: boolean; windowFromSchedule?: boolean; catchUp?: string },
  source: string | undefined,
): AttemptPolicy {
  // --retry-delay alone asks for later triggers to try again, spaced: no default budget then.
  if (policy.maxAttempts !== undefined || (flags.retryDelay !== undefined && policy.retries === 0) || flags.rerun)
    return policy;
  // --catch-up is the operator asking for earlier occurrences, failed ones too, to run again.
  if (!flags.windowFromSchedule || source === 'job-name' || flags.catchUp !== undefined) return policy;
  return { ...policy, maxAttempts: -(policy.retries + 1) };
}
