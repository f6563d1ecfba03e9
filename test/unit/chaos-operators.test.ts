// The chaos operators' invariants judge what they promise: each rule reports the history that
// breaks it and passes the ones that do not (a checker that never fires proves nothing).
import { describe, expect, it } from 'vitest';
import { judgeOperators } from '../chaos/lib/operators.mjs';

let ord = 0;
const ev = (seq: number, kind: string, extra: Record<string, unknown> = {}) => ({
  ord: ++ord,
  job: 'j',
  seq,
  kind,
  window_key: 'w1',
  owner: 'h:1:a',
  generation: '1',
  detail: {},
  ...extra,
});
const counts = (v: Record<string, string[]>) => Object.fromEntries(Object.entries(v).map(([k, l]) => [k, l.length]));
const none = {
  'completes-once': 0,
  'one-owner-per-token': 0,
  'pause-holds': 0,
  'pruned-never-runs': 0,
  'claimed-as': 0,
};

describe('chaos operators: the checker', () => {
  it('passes a clean history: acquire, claim, complete; pause, a skip, resume, acquire again', () => {
    const events = [
      ev(1, 'acquired'),
      ev(2, 'window-claimed'),
      ev(3, 'window-completed'),
      ev(4, 'paused'),
      ev(5, 'paused-skip', { window_key: 'w2' }),
      ev(6, 'resumed'),
      ev(7, 'acquired', { generation: '2', owner: 'h:2:b', window_key: 'w2' }),
    ];
    expect(counts(judgeOperators(events, []))).toEqual(none);
  });

  it('reports a window completed twice, a token given to two owners, a claim after a pause, a pruned window claimed again', () => {
    const pruneAt = { ord: 0, job: 'j', window_key: 'w1' };
    const events = [
      ev(1, 'acquired'),
      ev(2, 'window-claimed'),
      ev(3, 'window-completed'),
      ev(4, 'acquired', { owner: 'h:2:b' }),
    ];
    pruneAt.ord = ++ord;
    events.push(
      ev(5, 'window-claimed'),
      ev(6, 'window-completed'),
      ev(7, 'paused'),
      ev(8, 'window-claimed', { window_key: 'w3' }),
    );
    expect(counts(judgeOperators(events, [pruneAt]))).toEqual({
      'completes-once': 1,
      'one-owner-per-token': 1,
      'pause-holds': 1,
      'pruned-never-runs': 1,
      'claimed-as': 0,
    });
  });

  it('reports a ledger row whose claimed_as is not what its latest claim since its deletion says', () => {
    const events = [
      ev(1, 'window-claimed', { detail: { backfill: true, role: 'backfill' } }),
      ev(2, 'window-claimed', { window_key: 'w2', detail: { role: 'catch-up' } }),
      ev(3, 'window-claimed', { window_key: 'w3', detail: { role: 'catch-up' } }),
      ev(4, 'window-claimed', { window_key: 'w3', detail: { role: 'current' } }),
      ev(5, 'window-claimed', { window_key: 'w4', detail: { backfill: true } }),
    ];
    // w4 pruned after its claim (the row as deleted is checked too), then made again by hand: no claim since.
    const prunedAs = (claimed_as: string | null) => [{ ord: ord + 1, job: 'j', window_key: 'w4', claimed_as }];
    ord += 1;
    const row = (window_key: string, claimed_as: string | null) => ({ job: 'j', window_key, claimed_as });
    const right = [row('w1', 'backfill'), row('w2', 'catch-up'), row('w3', null), row('w4', null)];
    expect(counts(judgeOperators(events, prunedAs('backfill'), right))).toEqual(none);
    const wrong = [row('w1', null), row('w2', 'catch-up'), row('w3', 'catch-up'), row('w4', 'backfill')];
    expect(judgeOperators(events, prunedAs('backfill'), wrong)['claimed-as']).toHaveLength(3);
    expect(judgeOperators(events, prunedAs(null), right)['claimed-as']).toHaveLength(1);
  });
});
