// The claim of the next window of a sequence under a held lease (as sql/functions/claim_window.sql).
import type { ClaimWindowInput, ClaimWindowRow } from '../contract.js';
import { budgetFields } from './attempt-budget.js';
import type { Pg } from './context.js';

/** See LeaseStore.claimWindow (sql/013_catch_up.sql). */
export async function claimWindow(db: Pg, i: ClaimWindowInput): Promise<ClaimWindowRow> {
  const { rows } = await db.query(
    `SELECT * FROM ${db.s}.claim_window($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      i.job,
      i.owner,
      i.generation,
      i.window,
      i.scheduledAt ?? null,
      i.rerun,
      i.maxDelayMs ?? null,
      i.hostTime,
      JSON.stringify({ ...i.detail, ...budgetFields(i) }),
    ],
    i.answerTimeoutMs ?? db.readTimeoutMs,
  );
  const r = rows[0];
  // For backoff, claim_window answers the next allowed time in completed_at (its signature kept).
  const backoff = r.outcome === 'backoff';
  return {
    outcome: r.outcome,
    attempt: r.attempt,
    completedAt: backoff ? null : r.completed_at,
    nextAt: backoff ? r.completed_at : null,
    dbNow: r.db_now,
  };
}
