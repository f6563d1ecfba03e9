// The bench's report: a target is met only by what was measured.
import { describe, expect, it } from 'vitest';
import { Report } from '../bench/lib/report.mjs';

describe('bench report targets', () => {
  it('keeps the verdict of a measured row', () => {
    const rep = new Report();
    expect(
      rep.add({ bench: 'b', name: 'met', unit: 'ms', samples: [1, 2], target: { text: '<= 3', ok: true } }).target?.ok,
    ).toBe(true);
    expect(
      rep.add({ bench: 'b', name: 'missed', unit: 'ms', samples: [5], target: { text: '<= 3', ok: false } }).target?.ok,
    ).toBe(false);
  });

  it('reads NO for a row with nothing measured, though every() over no samples is true', () => {
    const rep = new Report();
    const empty: number[] = [];
    const row = rep.add({
      bench: 'herd',
      name: 'all trials failed',
      unit: 'ms',
      samples: empty,
      target: { text: '<= 1500 ms', ok: empty.every((x) => x <= 1500) },
    });
    expect(row.target?.ok).toBe(false);
    const nan = rep.add({
      bench: 'herd',
      name: 'no figure',
      unit: 'ms',
      samples: [NaN],
      target: { text: '<= 1500 ms', ok: true },
    });
    expect(nan.target?.ok).toBe(false);
    const line = rep
      .table()
      .split('\n')
      .find((l) => l.includes('all trials failed'));
    expect(line).toMatch(/NO \(nothing measured\)$/);
  });

  it('leaves a row without a verdict without one', () => {
    const rep = new Report();
    expect(
      rep.add({ bench: 'b', name: 'info', unit: 'ms', samples: [], target: { text: 'info only' } }).target?.ok,
    ).toBeUndefined();
  });
});
