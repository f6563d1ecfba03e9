// The contender's half of the two-clock takeover (docs/fencing.md "Which clock decides what"):
// a lease the database calls expired while this host's clock offset disagrees with the one its
// holder recorded (`unconfirmed`) is watched on this host's monotonic clock, as client-go's
// leader election watches the record it observed: once its generation and renewal counter have
// stayed unchanged for a full TTL of the holder since they were first seen, the holder has
// stopped (its child is gone by its last renewal's send + TTL, and that renewal was sent before
// this host first saw it), and the next acquire says so (AcquireInput.observed).
import type { AcquireRow } from '../store/contract.js';

export interface LeaseWatch {
  generation: string | null;
  renewals: string | null;
  /**
   * When the lease was first seen as it is, on this host's monotonic clock: the answer's
   * receipt, which comes after the holder's last renewal was sent (its stop point counts from it).
   */
  sinceMono: number;
  /** The holder's TTL (its own, which may differ from this run's). */
  ttlMs: number;
  /** Whether the wait for it was said in the log (once per state of the lease). */
  told: boolean;
}

export const UNCONFIRMED_MESSAGE =
  "lease expired on the database clock, but this host's clock offset to the database disagrees with its " +
  "holder's (the database clock may have stepped): waiting a full TTL on this host's monotonic clock for " +
  'its renewals to stay unchanged before taking it over';

/**
 * The watch after an answer naming a holder (busy, stale, unconfirmed) received at `receivedMono`:
 * kept while the lease is unchanged, so that the wait for a stale holder's expiry counts toward
 * it; undefined for any other answer, or from a store without the reading.
 */
export function watchLease(
  previous: LeaseWatch | undefined,
  row: AcquireRow,
  receivedMono: number,
  ownTtlMs: number,
): LeaseWatch | undefined {
  if (!row.clocks || (row.outcome !== 'busy' && row.outcome !== 'stale' && row.outcome !== 'unconfirmed'))
    return undefined;
  const generation = row.holderGeneration;
  const renewals = row.clocks.renewals;
  if (previous && renewals !== null && previous.generation === generation && previous.renewals === renewals)
    return previous;
  // The holder's TTL as its lease row has it; unknown (a read that missed it), the longer of ours
  // and a default lease's, so that the wait is never shorter than the holder's.
  const ttlMs = row.clocks.holderTtlMs ?? Math.max(ownTtlMs, 90_000);
  return { generation, renewals, sinceMono: receivedMono, ttlMs, told: false };
}

/** The observation to send with the acquire sent at `sentMono`, once watched for a full TTL. */
export function watchedLongEnough(
  watch: LeaseWatch | undefined,
  sentMono: number,
): { generation: string; renewals: string } | undefined {
  if (!watch || watch.generation === null || watch.renewals === null) return undefined;
  return sentMono - watch.sinceMono >= watch.ttlMs
    ? { generation: watch.generation, renewals: watch.renewals }
    : undefined;
}

/** Until the next look: at most a second (a holder that renews is seen soon), never past the TTL's end. */
export function watchPollMs(watch: LeaseWatch, nowMono: number): number {
  return Math.max(50, Math.min(1_000, watch.sinceMono + watch.ttlMs - nowMono + 10));
}

/** The log fields that say why the run waits. */
export function unconfirmedFields(row: AcquireRow, watch: LeaseWatch): Record<string, unknown> {
  const c = row.clocks;
  const holderLow =
    c?.holderOffsetMs === null || c?.holderOffsetMs === undefined
      ? undefined
      : c.holderOffsetMs - (c.holderUncertaintyMs ?? 0);
  return {
    holder: row.holder,
    holderGeneration: row.holderGeneration,
    renewals: watch.renewals,
    offsetMs: c?.offsetMs ?? undefined,
    holderOffsetMs: c?.holderOffsetMs ?? 'not recorded',
    holderUncertaintyMs: c?.holderUncertaintyMs ?? undefined,
    ...(holderLow !== undefined && c?.offsetMs !== null && c?.offsetMs !== undefined
      ? { disagreementMs: c.offsetMs - holderLow }
      : {}),
    waitMs: watch.ttlMs,
  };
}
