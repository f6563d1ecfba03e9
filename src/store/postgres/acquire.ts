// The acquisition of a lease and the claim of its window (as sql/functions/acquire.sql, and
// acquire_two_clock.sql from 035: acquire-two-clock.ts).
import type pg from 'pg';
import { ACQUIRE_LOCK_TIMEOUT_MS, type AcquireInput, type AcquireRow, type JobChange } from '../contract.js';
import { acquireStatement, clockParam, skipRecorded, twoClockReading } from './acquire-two-clock.js';
import { budgetFields } from './attempt-budget.js';
import { HOLDER_GONE_SQL, type Notice, type Pg, isUndefinedFunction } from './context.js';

/**
 * acquire()'s p_spec: the registry settings, the owner (register_job records who changed them;
 * it is not one of them) and the attempt budget (attempt_budget()), so that acquire's signature
 * stays as it is. None of them: NULL (nothing registered).
 */
function acquireSpec(i: AcquireInput): string | null {
  const budget = budgetFields(i);
  if (!i.spec && Object.keys(budget).length === 0) return null;
  return JSON.stringify({ ...i.spec, owner: i.owner, ...budget });
}

export async function acquire(db: Pg, i: AcquireInput): Promise<AcquireRow> {
  const notices: Notice[] = [];
  const send = (twoClock: boolean): Promise<pg.QueryResult> =>
    db.query(
      acquireStatement(db.s, twoClock),
      () => [
        i.job,
        i.owner,
        i.ttlMs,
        i.renewIntervalMs,
        i.window ?? null,
        i.scheduledAt ?? null,
        i.rerun,
        i.maxDelayMs ?? null,
        i.hostTime,
        acquireSpec(i),
        ACQUIRE_LOCK_TIMEOUT_MS,
        ...(twoClock ? [clockParam(i)] : []),
      ],
      i.answerTimeoutMs ?? db.readTimeoutMs,
      notices,
    );
  let result;
  try {
    result = await send(!db.found.beforeTwoClocks);
  } catch (err) {
    // A schema before 035 (a `migrate` pending): acquire() as before, the database clock alone.
    if (db.found.beforeTwoClocks || !isUndefinedFunction(err, 'acquire_two_clock')) throw err;
    db.found.beforeTwoClocks = true;
    result = await send(false);
  }
  const r = result.rows[0];
  const changed = notices.find((n) => n.message === 'leasejob:job-changed' && n.detail);
  const clocks = twoClockReading(r);
  // Only for a stale holder, whose wait is what a run then says: whether it crashed. Read in
  // the acquire's own statement from 035 (acquire_two_clock's holder_gone), else asked apart.
  const gone =
    r.outcome !== 'stale'
      ? undefined
      : 'holder_gone' in r
        ? r.holder_gone === true
        : await holderGone(db, i.job, r.holder_generation);
  return {
    ...(changed ? { jobChanged: JSON.parse(changed.detail as string) as JobChange } : {}),
    ...(gone ? { holderGone: true } : {}),
    outcome: r.outcome,
    generation: r.generation,
    attempt: r.attempt,
    dbNow: r.db_now,
    holder: r.holder,
    holderGeneration: r.holder_generation,
    holderWindow: r.holder_window,
    expiresAt: r.expires_at,
    completedAt: r.completed_at,
    ...(clocks ? { clocks } : {}),
    ...(skipRecorded(r) ? { skipRecorded: true } : {}),
  };
}

/**
 * Whether generation `generation` of the job's lease is held by a database session that is
 * gone (as acquire() judges it: sql/006_session_lookup.sql). Best effort: false when unknown.
 */
async function holderGone(db: Pg, job: string, generation: string | null): Promise<boolean> {
  try {
    const { rows } = await db.query(
      `SELECT ${HOLDER_GONE_SQL('l')} AS gone FROM ${db.s}.leases l WHERE l.name = $1 AND l.generation = $2`,
      [job, generation],
    );
    return rows[0]?.gone === true;
  } catch {
    return false;
  }
}
