// acquire_two_clock() (sql/functions/acquire_two_clock.sql, 035): acquire() with the two-clock
// takeover. The host's wall time is read as the statement leaves, once its connection is ready
// (a connect in between would make the contender's offset look larger than it is, and a crash
// takeover wait for nothing), and the contender's observation of the lease, once it watched it
// for a full TTL, rides along. The row adds what the runner needs to watch the lease and say why.
import type { AcquireInput, TwoClockReading } from '../contract.js';

/** The statement: acquire_two_clock, or acquire() on a schema before 035 (the first 11 values). */
export function acquireStatement(schema: string, twoClock: boolean): string {
  return twoClock
    ? `SELECT * FROM ${schema}.acquire_two_clock($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
    : `SELECT * FROM ${schema}.acquire($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`;
}

/** p_clock: host_ms read now (called as the statement is sent), and the observation if any. */
export function clockParam(i: AcquireInput): string {
  return JSON.stringify({
    host_ms: Date.now(),
    ...(i.observed ? { observed_generation: i.observed.generation, observed_renewals: i.observed.renewals } : {}),
    // The skip events as the runner would write them (runner.ts skipEvent): same detail, same format.
    ...(i.recordSkips
      ? { skips: { busy: i.recordSkips.busy, scheduled_at: i.scheduledAt?.toISOString() ?? null } }
      : {}),
  });
}

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

/** The two-clock columns of the answer (undefined on a schema before 035). */
export function twoClockReading(r: Record<string, unknown>): TwoClockReading | undefined {
  if (!('offset_ms' in r)) return undefined;
  return {
    renewals: r.renewals === null || r.renewals === undefined ? null : String(r.renewals),
    holderTtlMs: num(r.holder_ttl_ms),
    holderOffsetMs: num(r.holder_offset_ms),
    holderUncertaintyMs: num(r.holder_uncertainty_ms),
    offsetMs: num(r.offset_ms),
  };
}

/** Whether the answer's skip was recorded with it (AcquireInput.recordSkips). */
export const skipRecorded = (r: Record<string, unknown>): boolean => r.skip_recorded === true;
