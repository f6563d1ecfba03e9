// The finish of one window of a sequence, the lease kept (as sql/functions/finish_window.sql).
import type { FinishInput } from '../contract.js';
import type { Pg } from './context.js';
import { finishParams } from './finish.js';

/** See LeaseStore.finishWindow: finish() without the release. */
export async function finishWindow(db: Pg, i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
  const { rows } = await db.query(
    `SELECT * FROM ${db.s}.finish_window($1, $2, $3, $4, $5, $6, $7, $8)`,
    finishParams(i),
    i.answerTimeoutMs ?? db.readTimeoutMs,
  );
  return { held: rows[0].held, dbNow: rows[0].db_now };
}
