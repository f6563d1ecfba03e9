// The runner's half of the two-clock takeover (src/lease/two-clock.ts) and the holder's reading
// of a database clock step (keeper.ts databaseStepMs): pure functions, no database. The rule
// itself, on a real server whose clock steps, is test/integration/two-clocks.test.ts.
import { describe, expect, it } from 'vitest';
import { databaseStepMs } from '../../src/lease/keeper.js';
import { watchLease, watchedLongEnough, watchPollMs } from '../../src/lease/two-clock.js';
import type { AcquireRow } from '../../src/store/contract.js';

const row = (over: Partial<AcquireRow> & { renewals?: string | null }): AcquireRow => ({
  outcome: 'unconfirmed',
  generation: null,
  attempt: null,
  dbNow: new Date(0),
  holder: 'h:1:a',
  holderGeneration: '7',
  holderWindow: null,
  expiresAt: null,
  completedAt: null,
  clocks: {
    renewals: over.renewals === undefined ? '3' : over.renewals,
    holderTtlMs: 10_000,
    holderOffsetMs: 0,
    holderUncertaintyMs: 2,
    offsetMs: 25_000,
  },
  ...over,
});

describe('watching an unconfirmed lease', () => {
  it('counts a full TTL of the holder from the first answer showing the same generation and renewals', () => {
    const w1 = watchLease(undefined, row({}), 1_000, 3_000)!;
    expect(w1).toMatchObject({ generation: '7', renewals: '3', sinceMono: 1_000, ttlMs: 10_000, told: false });
    const w2 = watchLease(w1, row({}), 5_000, 3_000);
    expect(w2).toBe(w1);
    expect(watchedLongEnough(w2, 10_999)).toBeUndefined();
    expect(watchedLongEnough(w2, 11_000)).toEqual({ generation: '7', renewals: '3' });
  });

  it('starts again when the holder renews or the generation changes; a stale answer counts too', () => {
    const w1 = watchLease(undefined, row({ outcome: 'stale' }), 1_000, 3_000)!;
    expect(watchLease(w1, row({ renewals: '4' }), 2_000, 3_000)!.sinceMono).toBe(2_000);
    expect(watchLease(w1, row({ holderGeneration: '8' }), 3_000, 3_000)!.sinceMono).toBe(3_000);
    expect(watchLease(w1, row({}), 4_000, 3_000)!.sinceMono).toBe(1_000);
  });

  it('watches nothing it cannot compare: no reading, a counter not read, or an answer naming no holder', () => {
    expect(watchLease(undefined, { ...row({}), clocks: undefined }, 0, 3_000)).toBeUndefined();
    expect(watchLease(undefined, row({ outcome: 'acquired' }), 0, 3_000)).toBeUndefined();
    const unread = watchLease(undefined, row({ renewals: null }), 0, 3_000)!;
    expect(watchedLongEnough(unread, 1e9)).toBeUndefined();
    expect(watchLease(unread, row({ renewals: null }), 500, 3_000)!.sinceMono).toBe(500);
  });

  it('looks again at most every second, and right at the end of the TTL', () => {
    const w = watchLease(undefined, row({}), 0, 3_000)!;
    expect(watchPollMs(w, 0)).toBe(1_000);
    expect(watchPollMs(w, 9_700)).toBe(310);
    expect(watchPollMs(w, 20_000)).toBe(50);
  });
});

describe("the holder's reading of a database clock step", () => {
  const m = (offsetMs: number, uncertaintyMs = 5) => ({ offsetMs, uncertaintyMs, rttMs: 2 * uncertaintyMs });
  it('an offset that moves beyond both uncertainties and a second is a step of the database clock', () => {
    expect(databaseStepMs(m(0), m(25_000), 0)).toBe(25_000);
    expect(databaseStepMs(m(0), m(-5_000), 0)).toBe(-5_000);
  });
  it("noise, a first measurement, or a jump of this host's own wall clock is not", () => {
    expect(databaseStepMs(m(0), m(900), 0)).toBe(0);
    expect(databaseStepMs(m(0, 800), m(1_500, 800), 0)).toBe(0);
    expect(databaseStepMs(undefined, m(25_000), 0)).toBe(0);
    // This host's wall clock stepped +30 s: the offset fell by as much; the database did not move.
    expect(databaseStepMs(m(0), m(-30_000), 30_000)).toBe(0);
  });
});
