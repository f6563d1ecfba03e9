// A job paused and resumed by an operator (as sql/functions/pause_job.sql and resume_job.sql).
import type { OperatorResult, OperatorWrite, PauseInput } from '../contract.js';
import type { Pg } from './context.js';
import { operatorRow } from './operator-job.js';

export async function pause(db: Pg, i: PauseInput): Promise<OperatorResult> {
  const { rows } = await db.query(`SELECT * FROM ${db.s}.pause_job($1, $2, $3, $4, $5, $6, $7)`, [
    i.job,
    i.expectVersion ?? null,
    i.reason ?? null,
    i.until ?? null,
    i.untilMs ?? null,
    i.by,
    i.hostTime,
  ]);
  return { ...operatorRow(rows[0]), pausedUntil: rows[0].paused_until };
}

export async function resume(db: Pg, i: OperatorWrite): Promise<OperatorResult> {
  const { rows } = await db.query(`SELECT * FROM ${db.s}.resume_job($1, $2, $3, $4)`, [
    i.job,
    i.expectVersion ?? null,
    i.by,
    i.hostTime,
  ]);
  return operatorRow(rows[0]);
}
