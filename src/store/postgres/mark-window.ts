// A window's outcome set by hand (leasejob mark; as sql/functions/mark_window.sql).
import type { MarkInput, OperatorResult } from '../contract.js';
import type { Pg } from './context.js';
import { operatorRow } from './operator-job.js';

export async function mark(db: Pg, i: MarkInput): Promise<OperatorResult> {
  // durable_commit() in the same statement: the mark survives a crash whatever synchronous_commit says (021).
  const sql = `SELECT m.* FROM ${db.s}.durable_commit() d, ${db.s}.mark_window($1, $2, $3, $4, $5, $6, $7) m`;
  const { rows } = await db.query(sql, [
    i.job,
    i.window,
    i.outcome,
    i.reason ?? null,
    i.expectVersion ?? null,
    i.by,
    i.hostTime,
  ]);
  return {
    ...operatorRow(rows[0]),
    holder: rows[0].holder,
    holderGeneration: rows[0].holder_generation,
    previousOutcome: rows[0].previous_outcome,
  };
}
