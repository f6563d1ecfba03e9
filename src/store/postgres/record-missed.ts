// Windows recorded missed under a held lease (as sql/functions/record_missed.sql).
import type { RecordMissedInput } from '../contract.js';
import type { Pg } from './context.js';

/** See LeaseStore.recordMissed. */
export async function recordMissed(db: Pg, i: RecordMissedInput): Promise<number | undefined> {
  const { rows } = await db.query(
    `SELECT ${db.s}.record_missed($1, $2, $3, $4::text[], $5::timestamptz[], $6, $7) AS n`,
    [
      i.job,
      i.owner,
      i.generation,
      i.windows.map((w) => w.key),
      i.windows.map((w) => w.scheduledAt ?? null),
      i.reason,
      i.hostTime,
    ],
    i.answerTimeoutMs ?? db.readTimeoutMs,
  );
  return rows[0].n === null ? undefined : Number(rows[0].n);
}
