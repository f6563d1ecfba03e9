// An occurrence's attempt budget and retry backoff (as sql/functions/attempt_budget.sql and skip_budget.sql).
import { backoffMs } from '../../schedule/backoff.js';
import type { AttemptBudget, BudgetRefusal } from '../contract.js';
import type { Sqlite } from './context.js';
import { recordEventSync } from './record-event.js';

/** As the PostgreSQL store's: `exhausted` once a failed, lost or replaced window's attempts reached its budget. */
// A negative budget is run's default (-n failed attempts): reported as no budget, as before it.
export const budgetOutcome = (w: string): string =>
  `CASE WHEN ${w}.max_attempts > 0 AND ${w}.attempts >= ${w}.max_attempts AND ${w}.outcome IN ('failed', 'lost', 'replaced') ` +
  `THEN 'exhausted' ELSE ${w}.outcome END`;

/** The outcomes of an attempt that did not complete: each spends the budget (docs/occurrence.md). */
const SPENT = new Set(['failed', 'lost', 'replaced']);

/**
 * Whether the budget is spent. Positive (--max-attempts): every attempt not completed spends it.
 * Negative: run's default budget, -n *failed* attempts, counted as the window's window-failed
 * events (index events_window_failed), so a lost or replaced attempt does not spend it.
 */
function spent(s: Sqlite, job: string, key: string, maxAttempts: number, attempts: number): boolean {
  if (maxAttempts > 0) return attempts >= maxAttempts;
  const failed = s.db
    .prepare("SELECT count(*) AS n FROM events WHERE job = ? AND window_key = ? AND kind = 'window-failed'")
    .get(job, key) as { n: number };
  return failed.n >= -maxAttempts;
}

/**
 * As attempt_budget() and skip_budget(): the window's attempts spent (exhausted) or its last
 * failure too recent (backoff, expiresAt the next allowed time), recorded with its event;
 * undefined when it may run. Only a `failed` attempt is followed by the backoff: a lost or
 * replaced one (a crash taken over, a release, --on-busy replace) is retried at once.
 */
export function budgetRefusal(
  s: Sqlite,
  i: AttemptBudget & { job: string; owner: string; rerun: boolean; hostTime: Date },
  key: string | undefined,
  generation: string | undefined,
  now: number,
): { outcome: BudgetRefusal; attempt: number; expiresAt: Date | null } | undefined {
  if (key === undefined || i.rerun || (i.maxAttempts === undefined && i.retryDelayMs === undefined)) return undefined;
  const w = s.db
    .prepare('SELECT attempts, outcome, finished_at, completed_at FROM windows WHERE job = ? AND window_key = ?')
    .get(i.job, key) as
    { attempts: number; outcome: string; finished_at: number | null; completed_at: number | null } | undefined;
  if (!w || w.completed_at !== null || !SPENT.has(w.outcome)) return undefined;
  let outcome: BudgetRefusal;
  let nextAt: number | null = null;
  if (i.maxAttempts !== undefined && spent(s, i.job, key, i.maxAttempts, w.attempts)) outcome = 'exhausted';
  else if (i.retryDelayMs !== undefined && w.finished_at !== null && w.outcome === 'failed') {
    nextAt = w.finished_at + backoffMs(i.retryDelayMs, w.attempts);
    if (nextAt <= now) return undefined;
    outcome = 'backoff';
  } else return undefined;
  recordEventSync(
    s,
    {
      job: i.job,
      kind: `${outcome}-skip`,
      window: key,
      owner: i.owner,
      generation,
      hostTime: i.hostTime,
      detail: {
        attempts: w.attempts,
        ...(i.maxAttempts !== undefined ? { max_attempts: i.maxAttempts } : {}),
        ...(nextAt !== null ? { next_at: new Date(nextAt).toISOString() } : {}),
      },
    },
    now,
  );
  if (outcome === 'exhausted')
    s.db.prepare('UPDATE windows SET max_attempts = ? WHERE job = ? AND window_key = ?').run(i.maxAttempts, i.job, key);
  return { outcome, attempt: w.attempts, expiresAt: nextAt === null ? null : new Date(nextAt) };
}
