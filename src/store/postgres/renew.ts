// The renewal of a held lease, and the adoption of an acquisition whose answer was lost (as
// sql/functions/renew.sql, and renew_measured.sql from 035: renew-measured.ts).
import type { AdoptInput, RenewRow } from '../contract.js';
import { type Pg, isUndefinedFunction } from './context.js';
import { offsetValues, renewStatement } from './renew-measured.js';

/** Undefined when the lease is no longer ours (taken, expired or released). */
export async function renew(
  db: Pg,
  job: string,
  owner: string,
  generation: string,
  ttlMs: number,
  lockTimeoutMs: number,
  answerTimeoutMs: number,
  offset?: { offsetMs: number; uncertaintyMs: number },
): Promise<RenewRow | undefined> {
  const renewal = (): Promise<RenewRow | undefined> =>
    renewOnce(db, job, owner, generation, ttlMs, lockTimeoutMs, answerTimeoutMs, offset);
  for (;;) {
    try {
      return await renewal();
    } catch (err) {
      // A lease taken on a schema before 035 (or 025) keeps renewing while `migrate` brings it
      // up to date: without the offset (or the replace request).
      if (!db.found.beforeTwoClocks && isUndefinedFunction(err, 'renew_measured')) db.found.beforeTwoClocks = true;
      else if (!db.found.noReplaceRequests && isUndefinedFunction(err, 'replace_requested'))
        db.found.noReplaceRequests = true;
      else throw err;
    }
  }
}

async function renewOnce(
  db: Pg,
  job: string,
  owner: string,
  generation: string,
  ttlMs: number,
  lockTimeoutMs: number,
  answerTimeoutMs: number,
  offset: { offsetMs: number; uncertaintyMs: number } | undefined,
): Promise<RenewRow | undefined> {
  const measured = !db.found.beforeTwoClocks;
  // Client-side bound: a black-holed connection is dropped and the next renewal reconnects.
  // Sent again (rolled back): its lock wait still ends 500 ms before the answer is given up on.
  const { rows } = await db.query(
    renewStatement(db.s, measured, !db.found.noReplaceRequests),
    (leftMs) => [
      job,
      owner,
      generation,
      ttlMs,
      Math.floor(Math.max(50, Math.min(lockTimeoutMs, leftMs - 500))),
      ...(measured ? offsetValues(offset) : []),
    ],
    answerTimeoutMs,
  );
  const r = rows[0];
  if (r && r.renewed === false) return { dbNow: r.db_now, expiresAt: r.db_now, notRenewed: true };
  return r ? { dbNow: r.db_now, expiresAt: r.expires_at, replaceFor: r.replace_for } : undefined;
}

/** See LeaseStore.adopt: renew() as any renewal, and the attempt of the window that generation claimed. */
export async function adopt(
  db: Pg,
  i: AdoptInput,
): Promise<{ attempt: number; dbNow: Date; expiresAt: Date } | undefined> {
  const { rows } = await db.query(
    `SELECT r.db_now, r.expires_at,
            (SELECT w.attempts FROM ${db.s}.windows w WHERE w.job = $1 AND w.window_key = $6 AND w.generation = $3) AS attempt
       FROM ${db.s}.renew($1, $2, $3, $4, $5) r`,
    [i.job, i.owner, i.generation, i.ttlMs, i.lockTimeoutMs, i.window ?? null],
    i.answerTimeoutMs,
  );
  const r = rows[0];
  return r ? { attempt: r.attempt ?? 1, dbNow: r.db_now, expiresAt: r.expires_at } : undefined;
}
