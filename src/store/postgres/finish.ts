// The finish of a run: its window's outcome recorded and the lease released (as sql/functions/finish.sql).
import type { FinishInput } from '../contract.js';
import type { Pg } from './context.js';

/** finish() and finish_window() take the same arguments, in this order. */
export const finishParams = (i: FinishInput): unknown[] => [
  i.job,
  i.owner,
  i.generation,
  i.window ?? null,
  i.outcome,
  i.exitCode ?? null,
  i.hostTime,
  JSON.stringify(i.detail ?? {}),
];

/** See LeaseStore.abandon: finish() with no outcome, for the live lease this owner holds. */
export async function abandon(
  db: Pg,
  job: string,
  owner: string,
  hostTime: Date,
  answerTimeoutMs: number,
): Promise<string | undefined> {
  const { rows } = await db.query(
    `SELECT l.generation, f.held
       FROM ${db.s}.leases l
      CROSS JOIN LATERAL ${db.s}.finish(l.name, l.owner, l.generation, l.window_key, 'none', NULL, $3, '{}') f
      WHERE l.name = $1 AND l.owner = $2 AND l.released_at IS NULL AND l.expires_at > now()`,
    [job, owner, hostTime],
    answerTimeoutMs,
  );
  return rows[0]?.held ? String(rows[0].generation) : undefined;
}

/** Record the window outcome (if still held) and release. held=false: the lease was not ours. */
export async function finish(db: Pg, i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
  const { rows } = await db.query(
    `SELECT * FROM ${db.s}.finish($1, $2, $3, $4, $5, $6, $7, $8)`,
    finishParams(i),
    i.answerTimeoutMs ?? db.readTimeoutMs,
  );
  return { held: rows[0].held, dbNow: rows[0].db_now };
}
