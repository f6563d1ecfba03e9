// An occurrence's attempt budget as the PostgreSQL store sends and reports it (the rule itself:
// sql/functions/attempt_budget.sql and skip_budget.sql).
import type { AttemptBudget } from '../contract.js';

/**
 * A window's outcome as monitoring reports it: `exhausted` once a failed, lost or replaced window's
 * attempts reached the budget it was claimed (or refused) under (024).
 */
// A negative budget is run's default (031: -n failed attempts): reported as no budget, as before it.
export const budgetOutcome = (w: string): string =>
  `CASE WHEN ${w}.max_attempts > 0 AND ${w}.attempts >= ${w}.max_attempts AND ${w}.outcome IN ('failed', 'lost', 'replaced') ` +
  `THEN 'exhausted' ELSE ${w}.outcome END`;

/** A window's budget as monitoring reports it: NULL for run's default (negative, 031). */
export const reportedBudget = (w: string, dot = '.max_attempts'): string => `nullif(greatest(${w}${dot}, 0), 0)`;

/** The attempt budget as acquire() and claim_window() read it from their jsonb (024). */
export const budgetFields = (b: AttemptBudget): Record<string, number> => ({
  ...(b.maxAttempts !== undefined ? { max_attempts: b.maxAttempts } : {}),
  ...(b.retryDelayMs !== undefined ? { retry_delay_ms: b.retryDelayMs } : {}),
});
