// The renewal of a held lease, and the adoption of an acquisition whose answer was lost (as sql/functions/renew.sql).
import type { AdoptInput, RenewRow } from '../contract.js';
import { type LeaseRecord, type Sqlite, expired, hostMonotonicMs } from './context.js';

export async function renew(
  s: Sqlite,
  job: string,
  owner: string,
  generation: string,
  ttlMs: number,
): Promise<RenewRow | undefined> {
  return renewSync(s, job, owner, generation, ttlMs);
}

export function renewSync(
  s: Sqlite,
  job: string,
  owner: string,
  generation: string,
  ttlMs: number,
): RenewRow | undefined {
  const now = Date.now();
  const nowMono = hostMonotonicMs();
  const r = s.db
    .prepare(
      `UPDATE leases SET renewed_mono = @mono, expires_mono = @expires, renewed_at = @now
      WHERE name = @job AND owner = @owner AND generation = @generation AND boot_id = @boot AND expires_mono > @mono AND
        released_at IS NULL`,
    )
    .run({
      job,
      owner,
      generation: Number(generation),
      mono: nowMono,
      expires: nowMono + ttlMs,
      now,
      boot: s.boot,
    });
  if (r.changes !== 1) return undefined;
  const asked = s.db
    .prepare('SELECT replace_window FROM leases WHERE name = ? AND replace_generation = ?')
    .get(job, Number(generation)) as { replace_window: string | null } | undefined;
  return { dbNow: new Date(now), expiresAt: new Date(now + ttlMs), replaceFor: asked?.replace_window ?? null };
}

/** See LeaseStore.adopt (a local acquire always answers; kept for the contract). */
export async function adopt(
  s: Sqlite,
  i: AdoptInput,
): Promise<{ attempt: number; dbNow: Date; expiresAt: Date } | undefined> {
  return s.db
    .transaction(() => {
      const renewed = renewSync(s, i.job, i.owner, i.generation, i.ttlMs);
      if (!renewed) return undefined;
      const w =
        i.window === undefined
          ? undefined
          : (s.db
              .prepare('SELECT attempts FROM windows WHERE job = ? AND window_key = ? AND generation = ?')
              .get(i.job, i.window, Number(i.generation)) as { attempts: number } | undefined);
      return { attempt: w?.attempts ?? 1, ...renewed };
    })
    .immediate();
}

/** The lease as `owner` holds it as `generation`, live and not released; else undefined. */
export function heldLease(
  s: Sqlite,
  job: string,
  owner: string,
  generation: string,
  nowMono: number,
): LeaseRecord | undefined {
  const lease = s.db
    .prepare('SELECT * FROM leases WHERE name = ? AND owner = ? AND generation = ?')
    .get(job, owner, Number(generation)) as LeaseRecord | undefined;
  return lease !== undefined && !expired(s, lease, nowMono) && lease.released_at === null ? lease : undefined;
}
