// The reference model itself (test/model/occurrence-model.ts) encodes the semantics decided for
// issue 19: what counts as an attempt, what a trigger may do, what is due and not completed.
import { describe, expect, it } from 'vitest';
import {
  HOUR,
  SCHEDULES,
  decide,
  dueNotCompleted,
  exhausted,
  newJob,
  occOf,
  prune,
  rerun,
  trigger,
  windowKey,
} from '../model/occurrence-model.js';

const BASE = Date.parse('2026-12-06T03:00:00Z');
const k = (n: number, minute = 0) => windowKey(BASE - n * HOUR + minute * 60_000);
const job = (max = 2) => newJob(max, BASE + 10 * 60_000); // registered at 03:10
const NOW = BASE + 20 * 60_000;

describe('the occurrence model', () => {
  it('counts every non-completed attempt towards --max-attempts: failed, lost, replaced, crashed', () => {
    for (const status of ['failed', 'lost', 'replaced', 'crashed'] as const) {
      const j = job(1);
      Object.assign(occOf(j, k(1)), { attempts: 1, status });
      expect(decide(j, k(1), false)).toEqual({ start: false, why: 'exhausted' });
      expect(exhausted(j)).toEqual([k(1)]);
    }
  });

  it("run's default budget (no --max-attempts) counts failed attempts only: lost ones leave --retries its tries", () => {
    const j = job(0);
    Object.assign(occOf(j, k(1)), { attempts: 2, failed: 0, status: 'lost' });
    expect(trigger(j, k(1), { fails: true, retries: 2, backoff: false })).toEqual({ starts: 3, exit: 3 });
    expect(occOf(j, k(1))).toMatchObject({ attempts: 5, failed: 3 });
    expect(decide(j, k(1), false, 2)).toEqual({ start: false, why: 'exhausted' });
    // Reported as failed, not exhausted; --retry-delay without --retries has no default budget.
    expect(exhausted(j)).toEqual([]);
    expect(decide(j, k(1), true, 0)).toEqual({ start: false, why: 'backoff' });
  });

  it('applies the backoff after a failed finish only, never after a lost or replaced attempt', () => {
    const j = job(3);
    Object.assign(occOf(j, k(1)), { attempts: 1, status: 'failed' });
    Object.assign(occOf(j, k(2)), { attempts: 1, status: 'lost' });
    Object.assign(occOf(j, k(3)), { attempts: 1, status: 'replaced' });
    expect(decide(j, k(1), true)).toEqual({ start: false, why: 'backoff' });
    expect(decide(j, k(2), true)).toEqual({ start: true });
    expect(decide(j, k(3), true)).toEqual({ start: true });
  });

  it('never starts a completed occurrence again but for --rerun, which passes the budget', () => {
    const j = job(1);
    expect(trigger(j, k(1), { fails: false, retries: 0, backoff: false })).toEqual({ starts: 1, exit: 0 });
    expect(trigger(j, k(1), { fails: false, retries: 0, backoff: false })).toMatchObject({ starts: 0, why: 'closed' });
    expect(rerun(j, k(1), true)).toEqual({ starts: 1, exit: 3 });
    expect(occOf(j, k(1)).attempts).toBe(2);
    expect(exhausted(j)).toEqual([k(1)]);
  });

  it('retries inside a run stop at the budget', () => {
    const j = job(2);
    expect(trigger(j, k(1), { fails: true, retries: 5, backoff: false })).toEqual({ starts: 2, exit: 3 });
  });

  it('a paused trigger starts nothing and closes an occurrence without a row (skipped), not one with a row', () => {
    const j = job(3);
    Object.assign(occOf(j, k(2)), { attempts: 1, status: 'failed' });
    j.paused = true;
    expect(trigger(j, k(1), { fails: false, retries: 0, backoff: false })).toMatchObject({ starts: 0, why: 'paused' });
    expect(trigger(j, k(2), { fails: false, retries: 0, backoff: false })).toMatchObject({ starts: 0, why: 'paused' });
    expect(occOf(j, k(1)).status).toBe('paused-skipped');
    expect(occOf(j, k(2)).status).toBe('failed');
    expect(dueNotCompleted(j, NOW)).toEqual([]);
    j.paused = false;
    expect(dueNotCompleted(j, NOW)).toEqual([k(2)]);
  });

  it('due: a claimed occurrence whenever it was scheduled; one no run claimed only after the registration, the horizon and the schedule change', () => {
    const j = newJob(3, BASE - 2 * HOUR - 10 * 60_000); // registered at 00:50
    trigger(j, k(1), { fails: true, retries: 0, backoff: false });
    trigger(j, k(3), { fails: false, retries: 0, backoff: false });
    trigger(j, k(4), { fails: true, retries: 0, backoff: false });
    // 01:00 (k 2) and 03:00 (k 0) no run claimed, after the registration; 00:00 before it.
    expect(dueNotCompleted(j, NOW)).toEqual([k(4), k(2), k(1), k(0)]);
    // prune at 03:20 --older-than 1h50m: the horizon at 01:30; 01:00 no longer expected, the
    // failed 23:00 kept (not final) and still due; the completed 00:00 is the latest closing: kept.
    prune(j, NOW - 110 * 60_000);
    expect(dueNotCompleted(j, NOW)).toEqual([k(4), k(1), k(0)]);
    expect(j.occ.has(k(3))).toBe(true);
    // A trigger before the horizon records it missed: a row, due again.
    expect(trigger(j, k(2), { fails: false, retries: 0, backoff: false })).toMatchObject({ starts: 0, why: 'pruned' });
    expect(dueNotCompleted(j, NOW)).toEqual([k(4), k(2), k(1), k(0)]);
    // A schedule change at 03:15: the new schedule's earlier ticks no run claimed are not due.
    j.schedule = SCHEDULES[1];
    j.scheduleFrom = BASE + 15 * 60_000;
    expect(dueNotCompleted(j, NOW)).toEqual([]);
    trigger(j, k(1, 30), { fails: true, retries: 0, backoff: false });
    expect(dueNotCompleted(j, NOW)).toEqual([k(1, 30)]);
    // Its 03:30 tick, after the change, is due once past its grace.
    expect(dueNotCompleted(j, BASE + 31 * 60_000)).toEqual([k(1, 30), k(0, 30)]);
  });
});
