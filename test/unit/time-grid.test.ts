// The status page's grid in time without a browser: the page's columns (whole steps on the
// epoch, the last holding now), the step chosen from the jobs shown, and a column's worst occurrence.
import { describe, expect, it } from 'vitest';
import { columnsOf, timeAxis } from '../../src/monitor/time-grid.js';
import type { GridCell } from '../../src/monitor/occurrence-grid.js';

const now = new Date('2026-12-07T22:27:13Z');
const cell = (at: string, state: GridCell['state'], overdue?: string): GridCell => ({
  window: at,
  scheduledAt: new Date(at),
  state,
  overdue,
  attempts: 1,
  maxAttempts: null,
  reason: 'completed',
});

describe('timeAxis', () => {
  it('ends with the column that holds now, on whole steps, the same for every job', () => {
    const a = timeAxis(now, '1h', [60_000], 24);
    expect(a.to.toISOString()).toBe('2026-12-07T23:00:00.000Z');
    expect(a.from.toISOString()).toBe('2026-12-06T23:00:00.000Z');
    expect(a.auto).toBe(false);
  });

  it('chooses the narrowest step that holds the most frequent job shown, hourly without one', () => {
    expect(timeAxis(now, null, [3_600_000, 300_000, null], 24).step).toBe('5m');
    expect(timeAxis(now, null, [86_400_000], 24).step).toBe('1d');
    expect(timeAxis(now, null, [7 * 86_400_000], 24).step).toBe('1d');
    expect(timeAxis(now, null, [null], 24).step).toBe('1h');
    expect(timeAxis(now, 'nonsense', [120_000], 24)).toMatchObject({ step: '5m', auto: true });
  });
});

describe('columnsOf', () => {
  const axis = timeAxis(now, '1h', [], 24);
  it('puts each occurrence in the column of its time and shows the worst, what check reports first', () => {
    const cols = columnsOf(
      axis,
      [
        cell('2026-12-07T20:00:00Z', 'completed'),
        cell('2026-12-07T20:30:00Z', 'failed'),
        cell('2026-12-07T21:00:00Z', 'failed'),
        cell('2026-12-07T21:30:00Z', 'missed', 'missed'),
        cell('2026-12-01T00:00:00Z', 'failed'), // before the range: not shown
      ],
      new Date('2026-12-07T23:00:00Z'),
    );
    expect(cols).toHaveLength(24);
    expect(cols[21]!.cell?.state).toBe('failed');
    expect(cols[21]!.count).toBe(2);
    expect(cols[22]!.cell?.state).toBe('missed');
    expect(cols.filter((c) => c.cell).length).toBe(2);
    // The next tick is after the last column: no column says next.
    expect(cols.some((c) => c.next)).toBe(false);
  });

  it('marks the empty column of the next due tick, and columns older than a capped read', () => {
    const cols = columnsOf(axis, [], new Date('2026-12-07T22:45:00Z'), new Date('2026-12-07T10:00:00Z'));
    expect(cols[23]!.next).toBe(true);
    expect(cols.filter((c) => c.unread).length).toBe(11);
    expect(cols[10]!.unread).toBe(true);
    expect(cols[11]!.unread).toBe(false);
  });
});
