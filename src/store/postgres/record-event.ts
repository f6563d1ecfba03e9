// One event of the ledger (as sql/functions/record_event.sql).
import { EVENT_TIMEOUT_MS, type RecordEventInput } from '../contract.js';
import type { Pg } from './context.js';

export async function recordEvent(db: Pg, e: RecordEventInput): Promise<string> {
  const { rows } = await db.query(
    `SELECT ${db.s}.record_event($1, $2, $3, $4, $5, $6, $7) AS seq`,
    [
      e.job,
      e.kind,
      e.window ?? null,
      e.owner ?? null,
      e.generation ?? null,
      e.hostTime,
      JSON.stringify(e.detail ?? {}),
    ],
    e.answerTimeoutMs ?? EVENT_TIMEOUT_MS,
  );
  return rows[0].seq;
}
