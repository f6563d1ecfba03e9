// What every operator function answers (pause_job, resume_job, mark_window, release_lease).
import type { OperatorResult } from '../contract.js';

/** The fields every operator function answers. */
export function operatorRow(r: Record<string, unknown>): OperatorResult {
  return {
    status: r.status as OperatorResult['status'],
    version: r.version === null ? null : Number(r.version),
    seq: r.seq === null ? null : String(r.seq),
    dbNow: r.db_now as Date,
  };
}
