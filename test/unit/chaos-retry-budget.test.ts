// The chaos suite's retry-budget invariant (test/chaos/lib/retry-budget.mjs) on recorded actions.
import { describe, expect, it } from 'vitest';
import { judgeRetryBudget } from '../chaos/lib/retry-budget.mjs';

const T = Date.parse('2026-12-06T03:00:00Z');
const action = (over: Record<string, unknown> = {}) => ({
  kind: 'retry-budget',
  job: 'r1-opsretry',
  window: '2026-12-06T02:59:00Z',
  startedAt: T,
  endedAt: T + 5_000,
  crashes: [
    { ran: true, release: 0 },
    { ran: true, release: 0 },
  ],
  tries: 3,
  afterTries: 0,
  codes: { failing: 3, again: 0 },
  ...over,
});

describe('the chaos retry-budget invariant', () => {
  it('holds for three tries after two lost attempts, and a trigger after them that starts none', () => {
    expect(judgeRetryBudget([action()])).toEqual({ 'lost-attempts-spare-retries': [] });
  });

  it('is violated by a run the lost attempts cut short, or a trigger that starts again', () => {
    const v = judgeRetryBudget([action({ tries: 1 }), action({ afterTries: 1 })]);
    expect(v['lost-attempts-spare-retries']).toHaveLength(2);
  });

  it('does not judge a run a fault cut (not exit 3), a crash that never ran, or one beside a lossy fault', () => {
    const cut = action({ tries: 1, codes: { failing: 69, again: 0 } });
    const noRun = action({ tries: 1, crashes: [{ ran: false }, { ran: true, release: 0 }] });
    const lossy = action({ tries: 1 });
    expect(judgeRetryBudget([cut, noRun])['lost-attempts-spare-retries']).toEqual([]);
    expect(judgeRetryBudget([lossy], [[T + 1_000, T + 2_000]])['lost-attempts-spare-retries']).toEqual([]);
  });
});
