import { describe, expect, it } from 'vitest';
import { humanMs, renderTable } from '../../src/monitor/table.js';

describe('renderTable', () => {
  it('pads every column but the last to its widest cell and trims line ends', () => {
    expect(
      renderTable(
        ['A', 'LONG HEADER', 'Z'],
        [
          ['xx', 'y', ''],
          ['x', 'yy', 'last'],
        ],
      ),
    ).toBe('A   LONG HEADER  Z\n' + 'xx  y\n' + 'x   yy           last\n');
  });

  it('renders 150,000 rows (history --limit 100000, status of a large fleet) without exceeding the argument limit', () => {
    const rows = Array.from({ length: 150_000 }, (_, i) => [`job-${i}`, 'ok']);
    const text = renderTable(['JOB', 'DUE'], rows);
    expect(text.split('\n')).toHaveLength(150_002);
    expect(text.startsWith('JOB         DUE\n')).toBe(true);
  });
});

describe('humanMs', () => {
  it('formats durations compactly', () => {
    expect(humanMs(93_000)).toBe('1m33s');
    expect(humanMs(-93_000)).toBe('-1m33s');
    expect(humanMs(0)).toBe('0s');
    expect(humanMs(90_061_000)).toBe('1d1h1m1s');
    expect(humanMs(null)).toBe('-');
  });
});
