// What every operator write shares: the job locked and its version checked, the version bumped.
import type { OperatorResult, OperatorWrite } from '../contract.js';
import type { JobRecord, Sqlite } from './context.js';

/** The job, locked for this immediate transaction, or the answer when it cannot be written (unknown, conflict). */
export function operatorJob(
  s: Sqlite,
  i: OperatorWrite,
  now: number,
): { job: JobRecord } | { refused: OperatorResult } {
  const job = s.db.prepare('SELECT * FROM jobs WHERE name = ?').get(i.job) as JobRecord | undefined;
  const dbNow = new Date(now);
  if (!job) return { refused: { status: 'unknown', version: null, seq: null, dbNow } };
  if (i.expectVersion !== undefined && job.version !== i.expectVersion)
    return { refused: { status: 'conflict', version: job.version, seq: null, dbNow } };
  return { job };
}

export function bumpVersion(s: Sqlite, job: string, now: number): number {
  return (
    s.db
      .prepare('UPDATE jobs SET version = version + 1, updated_at = ? WHERE name = ? RETURNING version')
      .get(now, job) as { version: number }
  ).version;
}
