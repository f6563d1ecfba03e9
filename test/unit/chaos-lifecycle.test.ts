// The chaos lifecycle actors' invariants (issue 19) judge what they promise: each rule reports the
// history that breaks it and passes the one that keeps it (a checker that never fires proves nothing).
import { describe, expect, it } from 'vitest';
import { judgeLifecycle, latestTick, SCHEDULES } from '../chaos/lib/lifecycle.mjs';

const MIN = 60_000;
const T = Date.parse('2026-12-06T03:00:00Z');
const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');
const counts = (v: Record<string, string[]>) => Object.fromEntries(Object.entries(v).map(([k, l]) => [k, l.length]));
const none = { 'release-spends-budget': 0, 'schedule-change-not-due': 0, 'tokens-never-go-back': 0 };
const crash = (starts: number, again: number, extra = {}) => ({
  kind: 'crash-release',
  job: 'r1-opsrel',
  window: 'c1',
  blocked: true,
  starts,
  startedAt: T,
  endedAt: T + 5_000,
  codes: { crash: 'SIGKILL', release: 0, again },
  ...extra,
});
const change = (schedule: number, at: number, code = 0) => ({
  kind: 'schedule-change',
  job: 'r1-opssched',
  schedule,
  tick: iso(latestTick(schedule, at)),
  startedAt: at,
  endedAt: at + 500,
  code,
});
const check = (at: number, due: number[]) => ({
  kind: 'check',
  job: 'r1-opssched',
  startedAt: at,
  endedAt: at + 300,
  code: 2,
  due: due.map((t) => ({ window: iso(t), scheduledAt: new Date(t).toISOString() })),
});

describe('chaos lifecycle actors: the checker', () => {
  it('passes a clean history: one start then an exhausted skip, checks after changes list only later ticks, tokens grow', () => {
    const actions = [change(0, T), check(T + 1_000, []), change(1, T + 10 * MIN), check(T + 12 * MIN, [T + 11 * MIN])];
    const v = judgeLifecycle({
      actions,
      crashes: [crash(1, 0)],
      tokens: ['1', '2', '66000000000', '66000000001'],
      lossy: [],
    });
    expect(counts(v)).toEqual(none);
  });

  it('reports a released crash that started its child again, or whose next trigger did not skip', () => {
    const v = judgeLifecycle({
      actions: [],
      crashes: [crash(2, 0), crash(1, 3, { window: 'c2' })],
      tokens: [],
      lossy: [],
    });
    expect(counts(v)).toEqual({ ...none, 'release-spends-budget': 2 });
    expect(v['release-spends-budget'][0]).toMatch(/c1: 2 child starts under --max-attempts 1/);
  });

  it('does not judge a crash that overlapped a fault losing commits, nor one that never blocked', () => {
    const lossy: Array<[number, number]> = [[T + 2_000, T + 4_000]];
    const v = judgeLifecycle({
      actions: [],
      crashes: [crash(2, 0), crash(2, 0, { blocked: false })],
      tokens: [],
      lossy,
    });
    expect(counts(v)).toEqual(none);
  });

  it('reports a check that lists an occurrence of the new schedule from before the change no run claimed, or of the old one', () => {
    const at = T + 30 * MIN;
    const actions = [change(1, at), check(at + 2_000, [at - 29 * MIN, at - 2 * MIN])];
    const v = judgeLifecycle({ actions, crashes: [], tokens: [], lossy: [] });
    expect(counts(v)).toEqual({ ...none, 'schedule-change-not-due': 2 });
    // A change that failed (exit 69: perhaps not adopted) leaves the checks after it unjudged.
    const unsure = judgeLifecycle({
      actions: [change(1, at, 69), check(at + 2_000, [at - 29 * MIN])],
      crashes: [],
      tokens: [],
      lossy: [],
    });
    expect(counts(unsure)).toEqual(none);
    // A tick a change run claimed (left unfinished by a fault, say) is judged as any claimed one.
    const claimedTick = latestTick(1, at);
    const own = judgeLifecycle({
      actions: [change(1, at), check(at + 2_000, [claimedTick])],
      crashes: [],
      tokens: [],
      lossy: [],
    });
    expect(counts(own)).toEqual(none);
  });

  it('does not take a run after a failed change for a change: the registry may have held its schedule all along', () => {
    // Odd, then a change to even that failed (not adopted), then odd again: no change happened,
    // so odd ticks from before it are due; the next real change (to even) is judged again.
    const actions = [
      change(1, T),
      change(0, T + 10 * MIN, 69),
      change(1, T + 20 * MIN),
      check(T + 21 * MIN, [T + 3 * MIN, T + 5 * MIN]),
      change(0, T + 30 * MIN),
      check(T + 31 * MIN, [T + 5 * MIN]),
    ];
    const v = judgeLifecycle({ actions, crashes: [], tokens: [], lossy: [] });
    expect(counts(v)).toEqual({ ...none, 'schedule-change-not-due': 1 });
    expect(v['schedule-change-not-due'][0]).toMatch(/check at 2026-12-06T03:31/);
  });

  it('reports a token handed out again after the state file was restored', () => {
    const v = judgeLifecycle({ actions: [], crashes: [], tokens: ['1', '2', '3', '3', '4'], lossy: [] });
    expect(counts(v)).toEqual({ ...none, 'tokens-never-go-back': 1 });
    expect(v['tokens-never-go-back'][0]).toMatch(/token 3 after 3/);
  });

  it('the two schedules never share a tick, and latestTick gives a tick of each at least a minute back', () => {
    expect(SCHEDULES).toEqual(['*/2 * * * *', '1-59/2 * * * *']);
    const now = T + 90_500; // 03:01:30.5
    expect(iso(latestTick(0, now))).toBe('2026-12-06T03:00:00Z');
    expect(iso(latestTick(1, now))).toBe('2026-12-06T02:59:00Z');
  });
});
