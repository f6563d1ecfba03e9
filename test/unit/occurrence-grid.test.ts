// The grid's states (src/monitor/occurrence-grid.ts): every occurrence reason maps to one cell
// state, and a due occurrence `check` lists is outlined, added when nothing recorded it.
import { describe, expect, it } from 'vitest';
import { cellStateOf, gridOf } from '../../src/monitor/occurrence-grid.js';
import { OCCURRENCE_REASONS, type Occurrence } from '../../src/monitor/occurrences.js';
import type { JobState } from '../../src/monitor/job-states.js';

const budget = (attempts: number, maxAttempts: number | null) => ({ attempts, maxAttempts });

describe('occurrence grid', () => {
  it('gives every occurrence reason a state', () => {
    const states = Object.fromEntries(OCCURRENCE_REASONS.map((r) => [r, cellStateOf(r, budget(1, null), false)]));
    expect(states).toEqual({
      completed: 'completed',
      'caught-up': 'completed',
      backfilled: 'completed',
      running: 'running',
      failed: 'failed',
      exhausted: 'exhausted',
      'skipped-paused': 'paused',
      'skipped-marked': 'skipped',
      'skipped-busy': 'skipped',
      'skipped-replaced': 'replaced',
      'skipped-backoff': 'skipped',
      'missed-max-delay': 'missed',
      'missed-catch-up-limit': 'missed',
      'missed-other': 'missed',
    });
    expect(cellStateOf('failed', budget(1, 3), false)).toBe('retrying');
    expect(cellStateOf('failed', budget(3, 3), false)).toBe('failed');
    expect(cellStateOf('running', budget(1, null), true)).toBe('failed');
    expect(cellStateOf('no run', budget(0, null), false)).toBe('overdue');
  });

  it("outlines what check lists, adds the due ones nothing recorded, oldest first, at most the grid's size", () => {
    const at = (h: number) => new Date(Date.UTC(2026, 0, 1, h));
    const occ = (window: string, h: number, reason: Occurrence['reason']): Occurrence => ({
      window,
      scheduledAt: at(h),
      reason,
      outcome: null,
      attempts: 1,
      maxAttempts: null,
      skips: {},
      endedAt: null,
      firstSeenAt: null,
    });
    const job = {
      notCompleted: [
        { window: 'h1', scheduledAt: at(1), overdueSince: at(1), outcome: 'failed' },
        { window: 'h2', scheduledAt: at(2), overdueSince: at(2), outcome: 'no run' },
      ],
      openWindows: [],
    } as unknown as JobState;
    const cells = gridOf(job, [occ('h3', 3, 'completed'), occ('h1', 1, 'failed'), occ('h0', 0, 'completed')]);
    expect(cells.map((c) => [c.window, c.state, c.overdue])).toEqual([
      ['h0', 'completed', undefined],
      ['h1', 'failed', 'failed'],
      ['h2', 'overdue', 'no run'],
      ['h3', 'completed', undefined],
    ]);
    expect(gridOf(job, [occ('h3', 3, 'completed')], 2).map((c) => c.window)).toEqual(['h2', 'h3']);
  });
});
