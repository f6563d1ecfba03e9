import { describe, it, expect } from 'vitest';
import { DateTime, Duration } from 'luxon';
import { UsageError } from '../../src/errors.js';
import { parseIsoOffset } from '../../src/schedule/duration.js';
import {
  deriveOccurrence,
  parseKubernetesJobName,
  validateWindowFormat,
  windowKey,
} from '../../src/schedule/occurrence.js';
import { parseSchedule } from '../../src/schedule/cron.js';

const SP = 'America/Sao_Paulo';
const NY = 'America/New_York';
const minutesOf = (iso: string) => Date.parse(iso) / 60_000;

describe('parseKubernetesJobName', () => {
  it('reads the scheduled minute the CronJob controller puts in the name', () => {
    expect(parseKubernetesJobName('nightly-close-29383565')?.toISOString()).toBe('2025-11-13T06:05:00.000Z');
    expect(parseKubernetesJobName(`nightly-close-${minutesOf('2026-11-30T00:05:00-03:00')}`)?.toISOString()).toBe(
      '2026-11-30T03:05:00.000Z',
    );
    expect(parseKubernetesJobName('x-29383565')?.getTime()).toBe(29383565 * 60_000);
  });

  it.each([
    'nightly-manual',
    'nightly-close-manual-1',
    'x-abc12',
    'x-2938356a',
    '29383565',
    '-29383565',
    'x-',
    '',
    'x-24567',
    'x-99999999999',
    'nightly-29383565-abcde',
  ])('gives undefined for %j', (name) => {
    expect(parseKubernetesJobName(name)).toBeUndefined();
  });
});

describe('names of UTC', () => {
  it("give one key per occurrence whatever the spelling: UTC, Etc/UTC (the chart's), GMT, Zulu, any case", () => {
    const now = new Date('2026-11-30T03:05:07Z');
    const keys = ['UTC', 'Etc/UTC', 'etc/utc', 'GMT', 'Etc/GMT', 'Etc/GMT+0', 'Zulu', 'Universal', 'Etc/Greenwich'].map(
      (tz) => {
        const occ = deriveOccurrence({ schedule: parseSchedule('5 0 * * *', tz), now })!;
        return [windowKey(occ.scheduledAt, {}), windowKey(occ.scheduledAt, { format: 'yyyy-MM-dd HH:mm ZZ' })];
      },
    );
    for (const k of keys) expect(k).toEqual(['2026-11-30T00:05:00Z', '2026-11-30 00:05 +00:00']);
    // A zone at offset 0 that is not UTC keeps its own spelling (its summer instants differ anyway).
    expect(
      windowKey(deriveOccurrence({ schedule: parseSchedule('5 0 * * *', 'Europe/London'), now })!.scheduledAt, {}),
    ).toBe('2026-11-30T00:05:00+00:00');
    expect(parseSchedule('5 0 * * *', 'Etc/UTC').tz).toBe('UTC');
  });
});

describe('deriveOccurrence', () => {
  const nightly = parseSchedule('5 0 * * *', SP);
  const now = new Date('2026-11-30T03:05:07Z');

  it('refuses a --scheduled-time that is not a tick of the schedule, naming the ticks around it', () => {
    const off = (): unknown => deriveOccurrence({ scheduledTime: '2026-11-30T00:06:00-03:00', schedule: nightly, now });
    expect(off).toThrow(UsageError);
    expect(off).toThrow(
      'Expected `--scheduled-time` to be an occurrence of `--schedule` "5 0 * * *" in America/Sao_Paulo, got `2026-11-30T00:06:00-03:00`; ' +
        'the occurrences around it are 2026-11-30T00:05:00-03:00 and 2026-12-01T00:05:00-03:00.',
    );
    // The same instant written in another offset is the tick.
    expect(
      deriveOccurrence({ scheduledTime: '2026-11-30T03:05:00Z', schedule: nightly, now })?.scheduledAt.toISO(),
    ).toBe('2026-11-30T00:05:00.000-03:00');
    // Without a schedule any instant names itself.
    expect(deriveOccurrence({ scheduledTime: '2026-11-30T00:06:00-03:00', now })?.source).toBe('scheduled-time');
  });

  it('prefers --scheduled-time, then the Job name, then the wall clock', () => {
    const jobName = `nightly-close-${minutesOf('2026-11-29T00:05:00-03:00')}`;
    const explicit = deriveOccurrence({ scheduledTime: '2026-11-28T03:05:00Z', jobName, schedule: nightly, now });
    expect(explicit?.source).toBe('scheduled-time');
    expect(explicit?.scheduledAt.toISO()).toBe('2026-11-28T00:05:00.000-03:00');

    const named = deriveOccurrence({ jobName, schedule: nightly, now });
    expect(named?.source).toBe('job-name');
    expect(named?.scheduledAt.toISO()).toBe('2026-11-29T00:05:00.000-03:00');

    const manual = deriveOccurrence({ jobName: 'nightly-close-manual', schedule: nightly, now });
    expect(manual?.source).toBe('wall-clock');
    expect(manual?.scheduledAt.toISO()).toBe('2026-11-30T00:05:00.000-03:00');
  });

  it('refuses a Job name whose minute is no tick of the schedule in its zone (CronJob timeZone unlike --tz, a hand-made date suffix)', () => {
    // The CronJob fired 00:05 UTC (no timeZone) while leasejob reads the schedule in Sao Paulo.
    const utcFired = `nightly-close-${minutesOf('2026-11-30T00:05:00Z')}`;
    expect(() => deriveOccurrence({ jobName: utcFired, schedule: nightly, now })).toThrow(
      `the Kubernetes JOB_NAME ${utcFired} names the scheduled minute 2026-11-29T21:05:00-03:00, which is not an occurrence of \`--schedule\` "5 0 * * *" ` +
        'in America/Sao_Paulo (the occurrences around it are 2026-11-29T00:05:00-03:00 and 2026-11-30T00:05:00-03:00). If the CronJob has a timeZone, ' +
        'give the same one as `--tz`; a Job created by hand needs a name that does not end in digits (x-manual), or `--scheduled-time`. ' +
        `If \`--tz\` is the CronJob's timeZone already, the controller's time zone rules differ from this Node's (tzdata ${process.versions.tz}): update one or the other.`,
    );
    // `kubectl create job --from=cronjob/nightly-close nightly-close-20261130`: 20261130 unix minutes is 2008.
    expect(() => deriveOccurrence({ jobName: 'nightly-close-20261130', schedule: nightly, now })).toThrow(
      /names the scheduled minute 2008-07-\d\dT/,
    );
    // --scheduled-time still wins over the name, and a schedule without hours fits any zone.
    expect(
      deriveOccurrence({ scheduledTime: '2026-11-30T03:05:00Z', jobName: utcFired, schedule: nightly, now })?.source,
    ).toBe('scheduled-time');
    const every7 = parseSchedule('*/7 * * * *', 'UTC');
    expect(() =>
      deriveOccurrence({ jobName: `x-${minutesOf('2026-11-30T03:06:00Z')}`, schedule: every7, now }),
    ).toThrow(/not an occurrence/);
    expect(deriveOccurrence({ jobName: `x-${minutesOf('2026-11-30T03:00:00Z')}`, schedule: every7, now })?.source).toBe(
      'job-name',
    );
  });

  it('returns the occurrence in the schedule zone', () => {
    const occ = deriveOccurrence({ scheduledTime: '2026-11-30T03:05:00Z', schedule: nightly, now });
    expect(occ?.scheduledAt.zoneName).toBe(SP);
    expect(occ?.scheduledAt.toMillis()).toBe(Date.parse('2026-11-30T03:05:00Z'));
  });

  it('without a schedule, uses the zone given, else UTC', () => {
    expect(deriveOccurrence({ scheduledTime: '2026-11-30T00:05:00-03:00', now })?.scheduledAt.toISO()).toBe(
      '2026-11-30T03:05:00.000Z',
    );
    expect(deriveOccurrence({ scheduledTime: '2026-11-30T03:05:00Z', tz: SP, now })?.scheduledAt.toISO()).toBe(
      '2026-11-30T00:05:00.000-03:00',
    );
    expect(deriveOccurrence({ jobName: 'x-29383565', now })?.scheduledAt.toISO()).toBe('2025-11-13T06:05:00.000Z');
  });

  it('is undefined when nothing says which occurrence this is', () => {
    expect(deriveOccurrence({ now })).toBeUndefined();
    expect(deriveOccurrence({ jobName: 'nightly-manual', now })).toBeUndefined();
  });

  it('tolerates a host clock a few seconds behind the clock that fired the run', () => {
    const at = (iso: string) => deriveOccurrence({ schedule: nightly, now: new Date(iso) })?.scheduledAt.toISO();
    expect(at('2026-11-30T00:05:00-03:00')).toBe('2026-11-30T00:05:00.000-03:00');
    expect(at('2026-11-30T00:04:52-03:00')).toBe('2026-11-30T00:05:00.000-03:00');
    expect(at('2026-11-30T00:04:49-03:00')).toBe('2026-11-29T00:05:00.000-03:00');
    expect(at('2026-11-30T03:00:00-03:00')).toBe('2026-11-30T00:05:00.000-03:00');
  });

  it('keeps the tolerance under a quarter of the interval', () => {
    const minutely = parseSchedule('* * * * *', 'UTC');
    expect(deriveOccurrence({ schedule: minutely, now: new Date('2026-05-01T10:00:51Z') })?.scheduledAt.toISO()).toBe(
      '2026-05-01T10:01:00.000Z',
    );
    expect(deriveOccurrence({ schedule: minutely, now: new Date('2026-05-01T10:00:49Z') })?.scheduledAt.toISO()).toBe(
      '2026-05-01T10:00:00.000Z',
    );
  });

  it('from the wall clock, a crontab run after spring-forward is that day’s occurrence', () => {
    const s = parseSchedule('30 2 * * *', NY);
    const occ = deriveOccurrence({ schedule: s, now: new Date('2026-03-08T03:00:03-04:00') });
    expect(occ?.scheduledAt.toISO()).toBe('2026-03-08T03:00:00.000-04:00');
  });

  it('from the wall clock, each pass of a repeated hour is its own occurrence', () => {
    const s = parseSchedule('30 1 * * *', NY);
    const first = deriveOccurrence({ schedule: s, now: new Date('2026-11-01T01:30:01-04:00') });
    const second = deriveOccurrence({ schedule: s, now: new Date('2026-11-01T01:30:01-05:00') });
    expect(first?.scheduledAt.toISO()).toBe('2026-11-01T01:30:00.000-04:00');
    expect(second?.scheduledAt.toISO()).toBe('2026-11-01T01:30:00.000-05:00');
  });

  it.each(['2026-11-30T00:05:00', '2026-11-30', 'yesterday', '', '2026-13-30T00:05:00Z', '1764471900'])(
    'rejects --scheduled-time %j',
    (scheduledTime) => {
      expect(() => deriveOccurrence({ scheduledTime, schedule: nightly, now })).toThrow(UsageError);
      expect(() => deriveOccurrence({ scheduledTime, schedule: nightly, now })).toThrow(
        `Expected \`--scheduled-time\` to be an ISO-8601 time with an offset like 2026-11-30T00:05:00-03:00 or 2026-11-30T03:05:00Z, got \`${scheduledTime}\`.`,
      );
    },
  );
});

describe('windowKey', () => {
  const occurrence = DateTime.fromISO('2026-11-30T00:05:00-03:00', { zone: SP });

  it('defaults to the occurrence in ISO-8601 with its offset, without milliseconds', () => {
    expect(windowKey(occurrence, {})).toBe('2026-11-30T00:05:00-03:00');
    expect(windowKey(occurrence.setZone('UTC'), {})).toBe('2026-11-30T03:05:00Z');
  });

  it('shifts by the offset, then formats', () => {
    const offset = parseIsoOffset('-P1D', '--window-offset');
    expect(windowKey(occurrence, { offset, format: 'yyyy-MM-dd' })).toBe('2026-11-29');
    expect(windowKey(occurrence, { offset })).toBe('2026-11-29T00:05:00-03:00');
    expect(windowKey(occurrence, { format: 'yyyy-MM-dd' })).toBe('2026-11-30');
    expect(windowKey(occurrence, { format: "yyyy-MM-dd'T'HH:mm" })).toBe('2026-11-30T00:05');
  });

  it('adds days on the calendar of the zone, not 24-hour blocks', () => {
    const afterSpringForward = DateTime.fromISO('2026-03-09T00:30:00-04:00', { zone: NY });
    expect(windowKey(afterSpringForward, { offset: Duration.fromISO('-P1D') })).toBe('2026-03-08T00:30:00-05:00');
    expect(windowKey(afterSpringForward, { offset: Duration.fromISO('-PT24H') })).toBe('2026-03-07T23:30:00-05:00');
  });

  it('gives the two passes of a repeated hour distinct default keys, and one day key', () => {
    const s = parseSchedule('30 1 * * *', NY);
    const first = wallClockOccurrence(s, '2026-11-01T01:45:00-04:00');
    const second = wallClockOccurrence(s, '2026-11-01T01:45:00-05:00');
    expect(windowKey(first, {})).toBe('2026-11-01T01:30:00-04:00');
    expect(windowKey(second, {})).toBe('2026-11-01T01:30:00-05:00');
    expect(windowKey(first, { format: 'yyyy-MM-dd' })).toBe(windowKey(second, { format: 'yyyy-MM-dd' }));
  });

  it('does not depend on the host locale', () => {
    expect(windowKey(occurrence.setLocale('pt-BR'), { format: 'MMM yyyy' })).toBe('Nov 2026');
  });
});

describe('validateWindowFormat', () => {
  it.each([
    'yyyy-MM-dd',
    "yyyy-MM-dd'T'HH:mm",
    "yyyy-MM-dd'T'HH:mm:ss.SSS",
    'yyyy',
    'yyyy-MM',
    "'week' kkkk-WW",
    'yyyy-ooo',
    'yyyy-MM-dd hh:mm a',
    'yyyy-q',
    'D',
    'x',
  ])('accepts %j', (format) => {
    expect(() => validateWindowFormat(format)).not.toThrow();
  });

  it.each([
    ['HH', '"04"'],
    ['HH:mm', '"04:05"'],
    ['a', '"AM"'],
    ['T', '"04:05"'],
    ['EEEE', '"Saturday"'],
    ['MM-dd', '"02-03"'],
    ['yyyy-dd', '"2001-03"'],
    ['yyyy-MM-dd hh:mm', '"2001-02-03 04:05"'],
    ["yyyy-MM-dd'T'mm", '"2001-02-03T05"'],
    ["yyyy-MM-dd'T'HH:mm:SSS", '"2001-02-03T04:05:007"'],
    ['yyyy-WW', '"2001-01"'],
    ['kkkk-MM', '"2002-12"'],
    ['kkkk-MM-dd', '"2004-01-01"'],
    ['kkkk-ooo', '"2004-001"'],
    // No year, but a weekday or ordinal that tells nearby years apart: 28 years on they match.
    ['MM-dd EEE', '"02-03 Sat"'],
    ['cooo', '"6034"'],
  ])('rejects %j, whose keys recur', (format, key) => {
    expect(() => validateWindowFormat(format)).toThrow(UsageError);
    expect(() => validateWindowFormat(format)).toThrow(`got \`${format}\`: its keys recur (`);
    expect(() => validateWindowFormat(format)).toThrow(
      `both give ${key}), so a later occurrence would find its window already completed`,
    );
  });

  it.each([
    ['ZZ', 'UTC', '"+00:00"'],
    ['z', 'Asia/Kolkata', '"Asia/Kolkata"'],
    ["'run' ZZZZ", 'UTC', '"run UTC"'],
  ])("rejects %j, constant in the job's zone %s", (format, tz, key) => {
    expect(() => validateWindowFormat(format, tz)).toThrow(
      `got \`${format}\`: in ${tz} it gives every occurrence the same window key (${key}), so the job would run once and never again.`,
    );
  });

  it.each([
    'America/New_York',
    'America/Los_Angeles',
    'Pacific/Pago_Pago',
    'Pacific/Kiritimati',
    'Asia/Kolkata',
    'America/Sao_Paulo',
  ])('in %s too: every recurring format is rejected, every sound one accepted', (tz) => {
    for (const format of [
      'HH',
      'HH:mm',
      'a',
      'T',
      'EEEE',
      'MM-dd',
      'yyyy-dd',
      'yyyy-MM-dd hh:mm',
      "yyyy-MM-dd'T'mm",
      "yyyy-MM-dd'T'HH:mm:SSS",
      'yyyy-WW',
      "yyyy-'W'WW",
      'kkkk-MM',
      'kkkk-MM-dd',
      'kkkk-ooo',
      'MM-dd EEE',
      'cooo',
      'MM-dd ZZ',
    ]) {
      expect(() => validateWindowFormat(format, tz), format).toThrow('its keys recur');
    }
    for (const format of [
      'yyyy-MM-dd',
      "yyyy-MM-dd'T'HH:mm",
      "yyyy-MM-dd'T'HH:mm:ss.SSS",
      'yyyy',
      'yyyy-MM',
      "'week' kkkk-WW",
      'yyyy-ooo',
      'yyyy-MM-dd hh:mm a',
      'yyyy-q',
      'D',
      'x',
    ]) {
      expect(() => validateWindowFormat(format, tz), format).not.toThrow();
    }
  });

  it.each([
    ['ZZ', 'Pacific/Apia'],
    ['ZZZZ', 'Asia/Colombo'],
    ['ZZ', 'America/Montevideo'],
    ['z', 'Africa/Casablanca'],
  ])(
    'rejects %j in %s, whose offset changed since 2001 but gives every occurrence from now on one key',
    (format, tz) => {
      expect(() => validateWindowFormat(format, tz)).toThrow(/its keys recur|the same window key/);
    },
  );

  it("rejects a zone offset alone in a zone with DST (it recurs), and checks keys in the job's zone", () => {
    expect(() => validateWindowFormat('ZZ', 'America/New_York')).toThrow('its keys recur');
    expect(() => validateWindowFormat('yyyy-MM-dd', 'Pacific/Kiritimati')).not.toThrow();
    expect(() => validateWindowFormat('kkkk-MM-dd', 'Pacific/Honolulu')).toThrow('its keys recur');
  });

  it('rejects an empty format', () => {
    expect(() => validateWindowFormat('')).toThrow(UsageError);
    expect(() => validateWindowFormat('')).toThrow('it gives an empty window key');
  });

  it.each(["'nightly'", '---', "'yyyy'"])('rejects %j, which gives every occurrence the same key', (format) => {
    expect(() => validateWindowFormat(format)).toThrow(UsageError);
    expect(() => validateWindowFormat(format)).toThrow(
      `Expected \`--window-format\` to be a luxon format like yyyy-MM-dd or yyyy-MM-dd'T'HH:mm, got \`${format}\`: it has no date or time token, so every occurrence would get the same window key.`,
    );
  });
});

function wallClockOccurrence(s: ReturnType<typeof parseSchedule>, iso: string): DateTime {
  const occ = deriveOccurrence({ schedule: s, now: new Date(iso) });
  if (!occ) throw new Error('no occurrence');
  return occ.scheduledAt;
}
