// The chaos checker across lost history (a backup restored in place, a failover): a run whose
// acquisition and completion the restored database forgot is explained, and so is the token
// floor's jump; what the restored database itself shows is judged as strictly as ever.
import { describe, expect, it } from 'vitest';
import { checkRound } from '../chaos/lib/checks.mjs';

const T = Date.parse('2026-12-05T00:00:00Z');
const at = (s: number) => new Date(T + s * 1000).toISOString();
const FLOOR = '55000000000'; // the first token after the restart: the database clock in ms

let seq = 0;
const ev = (s: number, kind: string, generation: string, extra: Record<string, unknown> = {}) => ({
  job: 'j',
  seq: ++seq,
  kind,
  window_key: 'w1',
  owner: `h:${generation}:a`,
  generation,
  db_time: at(s),
  committed_at: at(s),
  detail: {},
  ...extra,
});

/** Generation 1 failed w1 before the backup; generation 2 (lost) completed it; after the restart FLOOR did. */
function history(extra: ReturnType<typeof ev>[] = []) {
  seq = 0;
  return {
    events: [
      ev(1, 'acquired', '1'),
      ev(1.1, 'window-claimed', '1'),
      ev(1.5, 'window-failed', '1'),
      ev(1.6, 'released', '1'),
      ev(20, 'acquired', FLOOR),
      ev(20.1, 'window-claimed', FLOOR),
      ev(21, 'window-completed', FLOOR),
      ...extra,
      ev(21.1, 'released', FLOOR),
    ],
    leases: [{ name: 'j', owner: `h:${FLOOR}:a`, generation: FLOOR, expires_at: at(24), released_at: at(21.1) }],
    windows: [
      { job: 'j', window_key: 'w1', generation: FLOOR, attempts: 2, outcome: 'completed', completed_at: at(21) },
    ],
    units: [],
    childEnds: [],
  };
}

const run = (id: number, generation: string, from: number, to: number) => ({
  id,
  job: 'j',
  window: 'w1',
  windowIndex: 0,
  host: 'direct',
  phase: 'chaos',
  generation,
  startedAt: T + from * 1000,
  exitedAt: T + to * 1000,
  code: 0,
  lines: [],
  faults: [],
  stderr: '',
});

// The backup began at 5 s, the server crashed at 12 s and was up again at 13 s.
const restore = { kind: 'restore-in-place', injected: true, at: T + 5_000, downAt: T + 12_000, upAt: T + 13_000 };

// What the children attempted: generation 2's effect is all that is left of it.
const effect = (token: string, s: number) => ({
  kind: 'effect',
  key: 'j:w1',
  item: 'j:w1:1',
  unit: 1,
  db_time: at(s),
  job: 'j',
  window: 'w1',
  token,
  pid: 1,
});

function check(data: ReturnType<typeof history>, faults: object[], figures: Record<string, unknown> = {}) {
  const result = checkRound({
    data,
    runs: [run(1, '2', 6, 9), run(2, FLOOR, 19.9, 21.2)],
    faults,
    jobs: ['j'],
    unitsOf: () => 0,
    crowdWindows: [],
    stragglers: [],
    clockOffsetMs: 0,
    effects: [effect('2', 7), effect(FLOOR, 20.5)],
    parentDeathSignal: true,
  });
  const { invariants } = result;
  Object.assign(figures, result.figures);
  return Object.fromEntries([...invariants].filter(([, l]) => l.length > 0));
}

describe('chaos checker: lost history', () => {
  it('explains a run the restored database forgot, and the token floor after the restart', () => {
    const figures: { lostHistory?: unknown } = {};
    expect(check(history(), [restore], figures)).toEqual({});
    expect(figures.lostHistory).toEqual({ generations: 1, windows: 1, completedAgain: 1 });
  });

  it('without the restore the same history is two violations: an exit 0 with nothing done, a token jump', () => {
    const v = check(history(), []);
    expect(Object.keys(v).sort()).toEqual(['exit-codes', 'generations']);
  });

  it('a budgeted start the restore made the database forget is not held against --max-attempts', () => {
    // Each run logged attempt 1 of 1: the first one's attempt was lost with the history after the backup.
    const budgeted = (id: number, from: number, to: number) => ({
      ...run(id, '', from, to),
      generation: undefined,
      maxAttempts: 1,
      attempt: 1,
      child: { pid: 100 + id },
    });
    const budget = (faults: object[]) =>
      checkRound({
        data: history(),
        runs: [budgeted(1, 6, 9), budgeted(2, 19.9, 21.2)],
        faults,
        jobs: ['j'],
        unitsOf: () => 0,
        crowdWindows: [],
        stragglers: [],
        clockOffsetMs: 0,
        effects: [],
        parentDeathSignal: true,
      }).invariants.get('budget');
    expect(budget([restore])).toEqual([]);
    expect(budget([])?.join('\n')).toMatch(/j w1: 2 budgeted child starts \(0 across lost history\), budget 1/);
  });

  it('a window the restored database saw completed twice is still a violation', () => {
    const v = check(history([ev(21.05, 'window-completed', FLOOR)]), [restore]);
    expect(v['exactly-once']?.join('\n')).toMatch(/j w1: completed twice/);
  });
});
