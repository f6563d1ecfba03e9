// A lease released by an operator (as sql/functions/release_lease.sql).
import type { OperatorResult, ReleaseInput } from '../contract.js';
import type { Pg } from './context.js';
import { operatorRow } from './operator-job.js';

export async function releaseLease(db: Pg, i: ReleaseInput): Promise<OperatorResult> {
  const { rows } = await db.query(`SELECT * FROM ${db.s}.release_lease($1, $2, $3, $4, $5)`, [
    i.job,
    i.expectVersion ?? null,
    i.force,
    i.by,
    i.hostTime,
  ]);
  const r = rows[0];
  return {
    ...operatorRow(r),
    holder: r.holder,
    holderGeneration: r.holder_generation,
    holderWindow: r.holder_window,
    live: r.live === true,
  };
}

/** Administrative release: expire now, keep the generation. */
export async function release(
  db: Pg,
  job: string,
  hostTime: Date,
): Promise<{ owner: string; generation: string } | undefined> {
  const { rows } = await db.query(
    `WITH r AS (
       UPDATE ${db.s}.leases SET expires_at = now(), released_at = now()
        WHERE name = $1 AND expires_at > now()
       RETURNING owner, generation, window_key),
     -- As release_lease (027): the released generation's attempt still running is lost.
     w AS (
       UPDATE ${db.s}.windows w SET outcome = 'lost', finished_at = now() FROM r
        WHERE w.job = $1 AND w.generation = r.generation AND w.completed_at IS NULL AND w.outcome = 'running')
     SELECT r.owner, r.generation,
            ${db.s}.record_event($1, 'released', r.window_key, r.owner, r.generation, $2, '{"by":"admin"}') AS seq
       FROM r`,
    [job, hostTime],
  );
  return rows[0] ? { owner: rows[0].owner, generation: rows[0].generation } : undefined;
}
