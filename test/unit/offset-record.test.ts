// Which clock-offset measurement a run records for its host: the latest precise one, else the
// least uncertain. Selection only: no statement is sent (the keeper is never started).
import { describe, expect, it } from 'vitest';
import { LeaseKeeper } from '../../src/lease/keeper.js';
import { silentLogger } from '../../src/log.js';
import type { LeaseStore } from '../../src/store/contract.js';

const keeper = (): LeaseKeeper =>
  new LeaseKeeper(
    {} as LeaseStore,
    { job: 'j', owner: 'h:1:a', generation: '1' },
    { ttlMs: 3_000, renewIntervalMs: 1_000, killGraceMs: 500 },
    { mono: 0, wall: 0 },
    silentLogger,
    () => {},
  );
const m = (offsetMs: number, uncertaintyMs: number) => ({ offsetMs, uncertaintyMs, rttMs: 2 * uncertaintyMs });

describe('the offset a run records', () => {
  it('a slow answer does not replace a precise measurement', () => {
    const k = keeper();
    k.noteOffset(m(3, 2));
    k.noteOffset(m(-1_250, 1_260));
    expect(k.offsetToRecord()).toEqual(m(3, 2));
  });

  it('a clock stepped during the run is recorded as it is now (the latest precise measurement)', () => {
    const k = keeper();
    k.noteOffset(m(10_000, 1));
    k.noteOffset(m(4, 3));
    expect(k.offsetToRecord()).toEqual(m(4, 3));
  });

  it('with no precise measurement, the least uncertain', () => {
    const k = keeper();
    k.noteOffset(m(500, 400));
    k.noteOffset(m(900, 900));
    expect(k.offsetToRecord()).toEqual(m(500, 400));
    k.noteOffset(undefined);
    expect(k.offsetToRecord()).toEqual(m(500, 400));
    expect(keeper().offsetToRecord()).toBeUndefined();
  });
});
