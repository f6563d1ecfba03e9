// A run asking the holder of another window to stop (run --on-busy replace; as sql/functions/request_replace.sql).
import { EVENT_TIMEOUT_MS, type ReplaceAnswer, type ReplaceRequest } from '../contract.js';
import type { Pg } from './context.js';

export async function requestReplace(db: Pg, i: ReplaceRequest): Promise<ReplaceAnswer> {
  const { rows } = await db.query(
    `SELECT * FROM ${db.s}.request_replace($1, $2, $3, $4, $5)`,
    [i.job, i.window, i.scheduledAt, i.requester, i.hostTime],
    EVENT_TIMEOUT_MS,
  );
  const r = rows[0];
  return {
    outcome: r.outcome,
    holder: r.holder,
    holderGeneration: r.holder_generation === null ? null : String(r.holder_generation),
    holderWindow: r.holder_window,
  };
}
