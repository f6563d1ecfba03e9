import { describe, it, expect } from 'vitest';
import { DateTime } from 'luxon';
import { UsageError } from '../../src/errors.js';
import {
  nextTick,
  parseSchedule,
  previousTick,
  previousTicks,
  typicalInterval,
  type Schedule,
} from '../../src/schedule/cron.js';

const NY = 'America/New_York';
const SP = 'America/Sao_Paulo';

/** Every tick in (from, to], walking forward, as ISO strings with their offsets. */
function ticksForward(s: Schedule, from: string, to: string): string[] {
  const end = Date.parse(to);
  const out: string[] = [];
  let at = new Date(from);
  for (let guard = 0; guard < 1000; guard++) {
    const tick = nextTick(s, at);
    expect(tick.toMillis()).toBeGreaterThan(at.getTime());
    if (tick.toMillis() > end) return out;
    out.push(tick.toISO({ suppressMilliseconds: true })!);
    at = tick.toJSDate();
  }
  throw new Error('nextTick did not get past the range');
}

/** The same range walked backwards with previousTick, returned in forward order. */
function ticksBackward(s: Schedule, from: string, to: string): string[] {
  const start = Date.parse(from);
  const out: string[] = [];
  let at = new Date(to);
  for (let guard = 0; guard < 1000; guard++) {
    const tick = previousTick(s, at);
    expect(tick.toMillis()).toBeLessThanOrEqual(at.getTime());
    if (tick.toMillis() <= start) return out.reverse();
    out.push(tick.toISO({ suppressMilliseconds: true })!);
    at = new Date(tick.toMillis() - 1);
  }
  throw new Error('previousTick did not get past the range');
}

/** Walks both ways and checks the invariants every caller relies on; returns the ticks. */
function ticks(expression: string, tz: string, from: string, to: string): string[] {
  const s = parseSchedule(expression, tz);
  const forward = ticksForward(s, from, to);
  expect(ticksBackward(s, from, to)).toEqual(forward);
  const instants = forward.map((iso) => Date.parse(iso));
  expect(new Set(forward).size).toBe(forward.length);
  expect(new Set(instants).size).toBe(instants.length);
  instants.forEach((instant, i) => {
    if (i > 0) expect(instant).toBeGreaterThan(instants[i - 1]!);
    // Inclusive at the tick itself, exclusive just before it, and stable in between.
    expect(previousTick(s, new Date(instant)).toMillis()).toBe(instant);
    expect(nextTick(s, new Date(instant - 1)).toMillis()).toBe(instant);
    const next = instants[i + 1];
    if (next !== undefined) {
      expect(previousTick(s, new Date(next - 1)).toMillis()).toBe(instant);
      expect(previousTick(s, new Date((instant + next) / 2)).toMillis()).toBe(instant);
      expect(nextTick(s, new Date(instant)).toMillis()).toBe(next);
    }
  });
  for (const iso of forward) expect(DateTime.fromISO(iso, { setZone: true }).isValid).toBe(true);
  return forward;
}

describe('parseSchedule', () => {
  it('keeps the expression, whitespace normalised, and the zone', () => {
    expect(parseSchedule('  30   1 * * * ', NY)).toEqual({ expression: '30 1 * * *', tz: NY });
  });

  it.each([
    ['@yearly', '2027-01-01T00:00:00Z'],
    ['@annually', '2027-01-01T00:00:00Z'],
    ['@monthly', '2026-12-01T00:00:00Z'],
    ['@weekly', '2026-12-06T00:00:00Z'],
    ['@daily', '2026-12-01T00:00:00Z'],
    ['@midnight', '2026-12-01T00:00:00Z'],
    ['@hourly', '2026-11-30T13:00:00Z'],
  ])('accepts the macro %s', (macro, next) => {
    const s = parseSchedule(macro, 'UTC');
    expect(s.expression).toBe(macro);
    expect(nextTick(s, new Date('2026-11-30T12:34:00Z')).toISO({ suppressMilliseconds: true })).toBe(next);
  });

  it.each(['0 9 * * MON-THU', '0 9 * * 1-5', '0 0 L * *', '0 0 * * 5#3', '*/5 9-17 * JAN,FEB *', '0 0 29 2 *'])(
    'accepts %j',
    (expression) => {
      expect(parseSchedule(expression, 'UTC').expression).toBe(expression);
    },
  );

  it.each([
    '',
    'abc',
    '* * * *',
    '0 30 1 * * *',
    '0 30 1 * * * 2026',
    '@reboot',
    '@minutely',
    '@weekdays',
    '60 * * * *',
    '* 24 * * *',
    '*/0 * * * *',
    'H * * * *',
    'H(0-10) 3 * * *',
    '0 0 31 2 *',
    '0 0 30 2 *',
  ])('rejects %j naming --schedule and the value', (expression) => {
    expect(() => parseSchedule(expression, 'UTC')).toThrow(UsageError);
    expect(() => parseSchedule(expression, 'UTC')).toThrow(
      `Expected \`--schedule\` to be 5 cron fields (minute hour day-of-month month day-of-week) like \`5 0 * * *\`, or @hourly, @daily, @weekly, @monthly, @yearly, got \`${expression}\``,
    );
  });

  it('says why a seconds field is rejected', () => {
    expect(() => parseSchedule('0 30 1 * * *', 'UTC')).toThrow('seconds and years are not supported');
  });

  // Offsets are zones to Intl on Node 24, not on Node 20: rejected on every version.
  it.each(['Mars/Olympus', '', 'America/Sao Paulo', '+03:00', '-0300', '+03'])('rejects the zone %j', (tz) => {
    expect(() => parseSchedule('5 0 * * *', tz)).toThrow(UsageError);
    expect(() => parseSchedule('5 0 * * *', tz)).toThrow(
      `Expected \`--tz\` to be an IANA time zone like America/Sao_Paulo or UTC, got \`${tz}\`.`,
    );
  });
});

describe('previousTick and nextTick', () => {
  const s = parseSchedule('*/15 * * * *', 'UTC');

  it('counts a tick exactly at `at` as the previous one, never as the next', () => {
    const at = new Date('2026-05-01T10:15:00Z');
    expect(previousTick(s, at).toISO()).toBe('2026-05-01T10:15:00.000Z');
    expect(nextTick(s, at).toISO()).toBe('2026-05-01T10:30:00.000Z');
    expect(previousTick(s, new Date(at.getTime() - 1)).toISO()).toBe('2026-05-01T10:00:00.000Z');
    expect(nextTick(s, new Date(at.getTime() - 1)).toISO()).toBe('2026-05-01T10:15:00.000Z');
  });

  it('returns the instant in the schedule zone', () => {
    const tick = previousTick(parseSchedule('5 0 * * *', SP), new Date('2026-11-30T12:00:00Z'));
    expect(tick.zoneName).toBe(SP);
    expect(tick.toISO()).toBe('2026-11-30T00:05:00.000-03:00');
  });

  it('reaches rare ticks', () => {
    const leap = parseSchedule('0 0 29 2 *', 'UTC');
    expect(nextTick(leap, new Date('2026-03-01T00:00:00Z')).toISO()).toBe('2028-02-29T00:00:00.000Z');
    expect(previousTick(leap, new Date('2026-03-01T00:00:00Z')).toISO()).toBe('2024-02-29T00:00:00.000Z');
  });

  it('rejects an invalid date instead of looping', () => {
    expect(() => previousTick(s, new Date(Number.NaN))).toThrow(RangeError);
  });
});

// Gap rule: a wall time skipped by spring-forward fires once, at the instant the gap ends.
// Repeat rule: a wall time in the repeated hour fires at both of its instants.
describe('America/New_York spring forward (2026-03-08 02:00 -> 03:00)', () => {
  it('30 1 * * *: untouched, the offset changes the day after', () => {
    expect(ticks('30 1 * * *', NY, '2026-03-07T00:00:00-05:00', '2026-03-09T12:00:00-04:00')).toEqual([
      '2026-03-07T01:30:00-05:00',
      '2026-03-08T01:30:00-05:00',
      '2026-03-09T01:30:00-04:00',
    ]);
  });

  it('30 2 * * *: the skipped 02:30 fires when the gap ends, 03:00 EDT', () => {
    expect(ticks('30 2 * * *', NY, '2026-03-07T00:00:00-05:00', '2026-03-09T12:00:00-04:00')).toEqual([
      '2026-03-07T02:30:00-05:00',
      '2026-03-08T03:00:00-04:00',
      '2026-03-09T02:30:00-04:00',
    ]);
  });

  it('0 * * * *: no 02:00 hour; its tick is the 03:00 one', () => {
    expect(ticks('0 * * * *', NY, '2026-03-08T00:00:00-05:00', '2026-03-08T04:00:00-04:00')).toEqual([
      '2026-03-08T01:00:00-05:00',
      '2026-03-08T03:00:00-04:00',
      '2026-03-08T04:00:00-04:00',
    ]);
  });

  it('*/15 * * * *: the four skipped quarters collapse onto 03:00', () => {
    expect(ticks('*/15 * * * *', NY, '2026-03-08T01:15:00-05:00', '2026-03-08T03:30:00-04:00')).toEqual([
      '2026-03-08T01:30:00-05:00',
      '2026-03-08T01:45:00-05:00',
      '2026-03-08T03:00:00-04:00',
      '2026-03-08T03:15:00-04:00',
      '2026-03-08T03:30:00-04:00',
    ]);
  });

  it('a crontab run fired right after the change names the shifted tick, not yesterday', () => {
    const s = parseSchedule('30 2 * * *', NY);
    expect(previousTick(s, new Date('2026-03-08T03:00:02-04:00')).toISO()).toBe('2026-03-08T03:00:00.000-04:00');
    expect(previousTick(s, new Date('2026-03-08T01:59:59-05:00')).toISO()).toBe('2026-03-07T02:30:00.000-05:00');
  });
});

describe('America/New_York fall back (2026-11-01 02:00 -> 01:00)', () => {
  it('30 1 * * *: 01:30 happens twice, as two distinct ticks', () => {
    expect(ticks('30 1 * * *', NY, '2026-10-31T00:00:00-04:00', '2026-11-02T12:00:00-05:00')).toEqual([
      '2026-10-31T01:30:00-04:00',
      '2026-11-01T01:30:00-04:00',
      '2026-11-01T01:30:00-05:00',
      '2026-11-02T01:30:00-05:00',
    ]);
  });

  it('30 2 * * *: not repeated, once', () => {
    expect(ticks('30 2 * * *', NY, '2026-10-31T12:00:00-04:00', '2026-11-02T12:00:00-05:00')).toEqual([
      '2026-11-01T02:30:00-05:00',
      '2026-11-02T02:30:00-05:00',
    ]);
  });

  it('0 * * * *: every real hour, 01:00 twice', () => {
    expect(ticks('0 * * * *', NY, '2026-10-31T23:30:00-04:00', '2026-11-01T03:00:00-05:00')).toEqual([
      '2026-11-01T00:00:00-04:00',
      '2026-11-01T01:00:00-04:00',
      '2026-11-01T01:00:00-05:00',
      '2026-11-01T02:00:00-05:00',
      '2026-11-01T03:00:00-05:00',
    ]);
  });

  it('*/15 * * * *: every real quarter hour through both passes', () => {
    expect(ticks('*/15 * * * *', NY, '2026-11-01T01:15:00-04:00', '2026-11-01T02:00:00-05:00')).toEqual([
      '2026-11-01T01:30:00-04:00',
      '2026-11-01T01:45:00-04:00',
      '2026-11-01T01:00:00-05:00',
      '2026-11-01T01:15:00-05:00',
      '2026-11-01T01:30:00-05:00',
      '2026-11-01T01:45:00-05:00',
      '2026-11-01T02:00:00-05:00',
    ]);
  });

  it('in the second pass the previous tick is the second-pass one', () => {
    const s = parseSchedule('*/15 * * * *', NY);
    expect(previousTick(s, new Date('2026-11-01T01:10:00-05:00')).toISO()).toBe('2026-11-01T01:00:00.000-05:00');
    expect(previousTick(s, new Date('2026-11-01T01:59:00-04:00')).toISO()).toBe('2026-11-01T01:45:00.000-04:00');
    expect(nextTick(s, new Date('2026-11-01T01:50:00-04:00')).toISO()).toBe('2026-11-01T01:00:00.000-05:00');
  });
});

describe('America/Sao_Paulo spring forward at midnight (2018-11-04 00:00 -> 01:00)', () => {
  it('5 0 * * *: the skipped 00:05 fires at 01:00', () => {
    expect(ticks('5 0 * * *', SP, '2018-11-03T00:00:00-03:00', '2018-11-05T12:00:00-02:00')).toEqual([
      '2018-11-03T00:05:00-03:00',
      '2018-11-04T01:00:00-02:00',
      '2018-11-05T00:05:00-02:00',
    ]);
  });

  it('0 * * * *: no midnight hour', () => {
    expect(ticks('0 * * * *', SP, '2018-11-03T22:30:00-03:00', '2018-11-04T02:00:00-02:00')).toEqual([
      '2018-11-03T23:00:00-03:00',
      '2018-11-04T01:00:00-02:00',
      '2018-11-04T02:00:00-02:00',
    ]);
  });

  it('*/15 * * * *', () => {
    expect(ticks('*/15 * * * *', SP, '2018-11-03T23:30:00-03:00', '2018-11-04T01:15:00-02:00')).toEqual([
      '2018-11-03T23:45:00-03:00',
      '2018-11-04T01:00:00-02:00',
      '2018-11-04T01:15:00-02:00',
    ]);
  });
});

describe('America/Sao_Paulo fall back at midnight (2018-02-18 00:00 -> 2018-02-17 23:00)', () => {
  it('5 0 * * *: 00:05 is not repeated, once a day', () => {
    expect(ticks('5 0 * * *', SP, '2018-02-16T12:00:00-02:00', '2018-02-19T12:00:00-03:00')).toEqual([
      '2018-02-17T00:05:00-02:00',
      '2018-02-18T00:05:00-03:00',
      '2018-02-19T00:05:00-03:00',
    ]);
  });

  it('30 23 * * *: 23:30 on the 17th twice', () => {
    expect(ticks('30 23 * * *', SP, '2018-02-17T12:00:00-02:00', '2018-02-18T12:00:00-03:00')).toEqual([
      '2018-02-17T23:30:00-02:00',
      '2018-02-17T23:30:00-03:00',
    ]);
  });

  it('0 * * * *: 23:00 twice', () => {
    expect(ticks('0 * * * *', SP, '2018-02-17T21:30:00-02:00', '2018-02-18T01:00:00-03:00')).toEqual([
      '2018-02-17T22:00:00-02:00',
      '2018-02-17T23:00:00-02:00',
      '2018-02-17T23:00:00-03:00',
      '2018-02-18T00:00:00-03:00',
      '2018-02-18T01:00:00-03:00',
    ]);
  });

  it('*/15 * * * * walks both passes of 23:xx', () => {
    const all = ticks('*/15 * * * *', SP, '2018-02-17T22:50:00-02:00', '2018-02-18T00:00:00-03:00');
    expect(all).toHaveLength(9);
    expect(all[3]).toBe('2018-02-17T23:45:00-02:00');
    expect(all[4]).toBe('2018-02-17T23:00:00-03:00');
  });
});

describe('a year of ticks around each transition', () => {
  it.each([
    ['30 1 * * *', NY, '2026-01-01T00:00:00Z', '2027-01-01T00:00:00Z', 365 + 1],
    ['30 2 * * *', NY, '2026-01-01T00:00:00Z', '2027-01-01T00:00:00Z', 365],
    ['5 0 * * *', SP, '2018-01-01T00:00:00Z', '2019-01-01T00:00:00Z', 365],
  ])('%s in %s: one tick a day, plus the repeated hour', (expression, tz, from, to, count) => {
    const s = parseSchedule(expression, tz);
    const forward = ticksForward(s, from, to);
    expect(forward).toHaveLength(count);
    expect(new Set(forward).size).toBe(count);
  });
});

describe('typicalInterval', () => {
  it('measures on the wall clock, so DST days are not 23 or 25 hours', () => {
    expect(typicalInterval(parseSchedule('5 0 * * *', SP), new Date('2018-11-04T12:00:00Z'))).toBe(86_400_000);
    expect(typicalInterval(parseSchedule('30 2 * * *', NY), new Date('2026-03-08T12:00:00Z'))).toBe(86_400_000);
    expect(typicalInterval(parseSchedule('30 1 * * *', NY), new Date('2026-11-01T06:00:00Z'))).toBe(86_400_000);
  });

  it('is the gap around `at`', () => {
    expect(typicalInterval(parseSchedule('*/15 * * * *', 'UTC'), new Date('2026-05-01T10:20:00Z'))).toBe(900_000);
    expect(typicalInterval(parseSchedule('@hourly', 'UTC'), new Date('2026-05-01T10:00:00Z'))).toBe(3_600_000);
    expect(typicalInterval(parseSchedule('0 9 * * 1-5', 'UTC'), new Date('2026-05-01T12:00:00Z'))).toBe(3 * 86_400_000);
  });
});

describe('previousTicks: one walk, the same ticks as previousTick step by step', () => {
  // Each zone's DST changes (gaps and repeated hours at 02:00, at midnight, half-hour shifts) and
  // schedules from every minute to weekly, walked back from instants around the changes.
  const zones = [
    'UTC',
    'America/New_York',
    'America/Sao_Paulo',
    'Europe/Berlin',
    'Australia/Lord_Howe',
    'Asia/Kolkata',
  ];
  const schedules = ['* * * * *', '*/15 * * * *', '0 * * * *', '30 1 * * *', '30 2 * * *', '5 0 * * *', '30 2 * * 1'];
  const starts = [
    '2026-03-08T09:00:00Z',
    '2026-11-01T08:10:00Z',
    '2018-11-04T05:00:00Z',
    '2018-02-18T04:00:00Z',
    '2026-03-29T03:00:00Z',
    '2026-10-25T02:30:00Z',
  ];
  const stepByStep = (s: Schedule, at: Date, since: number, max: number): number[] => {
    const ticks = [previousTick(s, at).toMillis()];
    while (ticks.length < max) {
      const earlier = previousTick(s, new Date(ticks.at(-1)! - 1)).toMillis();
      if (earlier < since || earlier >= ticks.at(-1)!) break;
      ticks.push(earlier);
    }
    return ticks;
  };
  it.each(zones)('%s', (tz) => {
    for (const expr of schedules)
      for (const start of starts) {
        const s = parseSchedule(expr, tz);
        const at = new Date(start);
        const since = at.getTime() - 30 * 86_400_000;
        expect(previousTicks(s, at, since, 30), `${expr} ${tz} ${start}`).toEqual(stepByStep(s, at, since, 30));
      }
  });
});
