import { describe, it, expect } from 'vitest';
import { parseDuration, parseIsoOffset } from '../../src/schedule/duration.js';
import { UsageError } from '../../src/errors.js';

describe('parseDuration', () => {
  it.each([
    ['500ms', 500],
    ['90s', 90_000],
    ['2m', 120_000],
    ['1h', 3_600_000],
    ['1d', 86_400_000],
    ['1h30m', 5_400_000],
    ['1h30m10s', 5_410_000],
    ['1m500ms', 60_500],
    ['1.5s', 1_500],
    ['0.5m', 30_000],
    [' 90s ', 90_000],
    ['366d', 366 * 86_400_000],
    ['PT90S', 90_000],
    ['PT1H30M', 5_400_000],
    ['PT1.5S', 1_500],
    ['P1D', 86_400_000],
  ])('reads %j as %d ms', (text, ms) => {
    expect(parseDuration(text, '--ttl')).toBe(ms);
  });

  it.each([
    '',
    '   ',
    'abc',
    '90',
    'NaN',
    'Infinity',
    '1e3s',
    '90S',
    '1h 30m',
    '30s1m',
    '1m1m',
    's',
    'P',
    'PT',
    'pt90s',
  ])('rejects %j naming the flag and the value', (text) => {
    expect(() => parseDuration(text, '--ttl')).toThrow(UsageError);
    expect(() => parseDuration(text, '--ttl')).toThrow(
      `Expected \`--ttl\` to be a duration like 90s, 2m or PT90S, got \`${text}\`.`,
    );
  });

  it.each(['-5s', '0s', '0ms', '0.1ms', 'PT0S', '-PT5S', 'PT-5S', '-0s'])('rejects %j as not positive', (text) => {
    expect(() => parseDuration(text, '--ttl')).toThrow(UsageError);
    expect(() => parseDuration(text, '--ttl')).toThrow(
      `Expected \`--ttl\` to be a positive duration like 90s, 2m or PT90S, got \`${text}\`.`,
    );
  });

  it.each(['367d', 'P400D', '9000h'])('rejects the absurdly long %j', (text) => {
    expect(() => parseDuration(text, '--max-runtime')).toThrow(
      `Expected \`--max-runtime\` to be a duration of at most 366 days, like 90s, 2m or PT90S, got \`${text}\`.`,
    );
  });

  it('gives the exit code of a usage error', () => {
    try {
      parseDuration('abc', '--kill-grace');
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(UsageError);
      expect((error as UsageError).exitCode).toBe(64);
      expect((error as UsageError).message).toContain('`--kill-grace`');
    }
  });
});

describe('parseIsoOffset', () => {
  it.each([
    ['-P1D', { days: -1 }],
    ['-PT1H', { hours: -1 }],
    ['P1D', { days: 1 }],
    ['PT24H', { hours: 24 }],
    ['-P1DT2H', { days: -1, hours: -2 }],
    ['P1M', { months: 1 }],
    // The short forms every other duration flag takes (issue 20): days stay calendar days.
    ['-1d', { days: -1 }],
    ['1d', { days: 1 }],
    ['-2h', { hours: -2 }],
    ['-1d12h', { days: -1, hours: -12 }],
    ['90m', { minutes: 90 }],
  ])('reads %j keeping its units', (text, units) => {
    expect(parseIsoOffset(text, '--window-offset').toObject()).toEqual(units);
  });

  it.each(['', 'P', '-P', '-', 'd', '1x', '30s1m', 'abc', '+P1D', 'p1d', 'P1X'])('rejects %j', (text) => {
    expect(() => parseIsoOffset(text, '--window-offset')).toThrow(UsageError);
    expect(() => parseIsoOffset(text, '--window-offset')).toThrow(
      `Expected \`--window-offset\` to be a duration like -1d, -2h, 1d or -P1D (ISO-8601), got \`${text}\`.`,
    );
  });
});
