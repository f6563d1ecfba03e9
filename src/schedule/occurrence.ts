// Which scheduled occurrence a run is, from the clock that fired it, and the window key derived from it.
import { DateTime, type Duration } from 'luxon';
import { MAX_AHEAD_OF_HOST_MS } from '../clock.js';
import { UsageError } from '../errors.js';
import { nextTick, previousTick, typicalInterval, type Schedule } from './cron.js';

export type OccurrenceSource = 'scheduled-time' | 'job-name' | 'wall-clock';

/** Suffixes outside these years are not scheduled minutes (a pod's random suffix can be all digits). */
const PLAUSIBLE_FROM_MS = Date.UTC(2000, 0, 1);
const PLAUSIBLE_TO_MS = Date.UTC(2200, 0, 1);

/**
 * How far the host clock may lag the clock that fired the run and still name the right tick.
 * A pod starts seconds after the CronJob controller fires, but its node's clock can be a few
 * seconds behind the controller's, reading 23:59:58 for a midnight tick. 10 s covers NTP-synced
 * nodes; a quarter interval keeps the tolerance well away from the previous tick.
 */
const MAX_LAG_TOLERANCE_MS = 10_000;

/**
 * The Kubernetes CronJob controller names each Job `<cronjob>-<scheduled time in unix minutes>`,
 * the exact occurrence. A manual `kubectl create job --from=cronjob/x x-manual` has no such suffix.
 */
export function parseKubernetesJobName(jobName: string): Date | undefined {
  const match = /^.+-(\d{1,12})$/.exec(jobName.trim());
  if (!match) return undefined;
  const ms = Number(match[1]) * 60_000;
  return ms >= PLAUSIBLE_FROM_MS && ms < PLAUSIBLE_TO_MS ? new Date(ms) : undefined;
}

/**
 * Priority: an explicit `--scheduled-time`, then the Job name, then (with a schedule) the host's
 * wall clock, which is what fired a crontab entry. Never the database clock, never start time
 * rounded. Undefined when nothing says which occurrence this is.
 */
export function deriveOccurrence(input: {
  scheduledTime?: string | undefined;
  jobName?: string | undefined;
  schedule?: Schedule | undefined;
  /** Zone of the result when there is no schedule; default UTC. */
  tz?: string | undefined;
  now: Date;
  /** The window is given literally: the time only dates it (advice differs). */
  literalWindow?: boolean;
}): { scheduledAt: DateTime; source: OccurrenceSource } | undefined {
  const zone = input.schedule?.tz ?? input.tz ?? 'UTC';
  if (input.scheduledTime !== undefined) {
    const scheduledAt = parseScheduledTime(input.scheduledTime).setZone(zone);
    if (input.schedule !== undefined) checkIsTick(input.schedule, scheduledAt, input.scheduledTime);
    checkNotAhead(scheduledAt, input.now, `\`--scheduled-time\` ${input.scheduledTime}`, input.literalWindow === true);
    return { scheduledAt, source: 'scheduled-time' };
  }
  const fromName = input.jobName !== undefined ? parseKubernetesJobName(input.jobName) : undefined;
  if (fromName !== undefined) {
    const scheduledAt = DateTime.fromJSDate(fromName, { zone });
    if (input.schedule !== undefined) checkJobNameIsTick(input.schedule, scheduledAt, input.jobName!);
    checkNotAhead(scheduledAt, input.now, `the Kubernetes JOB_NAME ${input.jobName}`, false);
    return { scheduledAt, source: 'job-name' };
  }
  if (input.schedule === undefined) return undefined;
  const tolerance = Math.min(MAX_LAG_TOLERANCE_MS, typicalInterval(input.schedule, input.now) / 4);
  const at = new Date(input.now.getTime() + tolerance);
  return { scheduledAt: previousTick(input.schedule, at), source: 'wall-clock' };
}

/**
 * The window key: by default the occurrence in ISO-8601 with its offset (distinct for the two
 * passes of a repeated hour); `offset` shifts it calendar-aware in its zone before `format`.
 */
export function windowKey(
  scheduledAt: DateTime,
  opts: { format?: string | undefined; offset?: Duration | undefined },
): string {
  const shifted = opts.offset !== undefined ? scheduledAt.plus(opts.offset) : scheduledAt;
  if (!shifted.isValid) throw new RangeError(`Invalid occurrence: ${shifted.invalidReason}`);
  if (opts.format === undefined) return shifted.toISO({ suppressMilliseconds: true })!;
  // A fixed locale: the same occurrence must give the same key on every host, whatever its LANG.
  return shifted.setLocale('en-US').toFormat(opts.format);
}

/**
 * Instants that expose a format whose keys come back: each pair of equal-looking neighbours a
 * period apart (half a second up to a year, and the ISO week-year's edges) has an instant between
 * them that differs in the smaller fields. Built from wall-clock times in the job's zone, where
 * its keys are rendered: instants chosen in UTC fall on another local day west of UTC, and the
 * edges they were chosen for move. Sorted ascending; built on first use for each zone (nothing at
 * import time: most runs have no --window-format).
 */
const recurrenceProbes = new Map<string, readonly DateTime[]>();
function probes(tz: string): readonly DateTime[] {
  let built = recurrenceProbes.get(tz);
  if (built === undefined) {
    built = buildRecurrenceProbes(tz);
    recurrenceProbes.set(tz, built);
  }
  return built;
}
/** The calendar repeats every 28 years: same weekdays, week numbers and ordinals. */
const FAR_PROBE_DAYS = ['2029-02-03', '2043-08-03', '2057-02-03'];
/** The probes from FAR_PROBE_DAYS on (the others are 2001-2005). */
const FAR_PROBE_YEAR = 2029;

function buildRecurrenceProbes(tz: string): readonly DateTime[] {
  const at = (day: string): DateTime => DateTime.fromISO(`${day}T04:05:06.007`, { zone: tz });
  const base = at('2001-02-03'); // a Saturday
  const steps = [
    {},
    { milliseconds: 500 },
    { seconds: 1 },
    { seconds: 30 },
    { minutes: 1 },
    { minutes: 30 },
    { hours: 1 },
    { hours: 6 },
    { hours: 12 },
    { hours: 18 },
    { days: 1 },
    { days: 3 },
    { days: 7 },
    { days: 15 },
    { months: 1 },
    { months: 6 },
    { years: 1 },
  ];
  // 2001-01-01 and 2001-12-31 are both Mondays of ISO week 1 (of 2001 and of 2002). 2004-01-01
  // and 2005-01-01 are both in ISO week-year 2004 (week 1 and week 53): kkkk-MM-dd, kkkk-ooo.
  const weekYearEdges = [
    '2001-01-01',
    '2001-12-30',
    '2001-12-31',
    '2002-06-30',
    '2002-12-02',
    '2004-01-01',
    '2004-07-01',
    '2005-01-01',
  ];
  // A key without the year (MM-dd EEE, cooo) recurs 28 years on, after a different key in
  // between; validateWindowFormat also compares these three directly.
  return [...steps.map((step) => base.plus(step)), ...weekYearEdges.map(at), ...FAR_PROBE_DAYS.map(at)].sort(
    (x, y) => x.toMillis() - y.toMillis(),
  );
}

/**
 * Rejects a `--window-format` that would give every occurrence the same (or an empty) key, or
 * one whose keys recur (HH:mm, EEEE, yyyy-dd, MM-dd EEE): a later occurrence would find its key already
 * completed and the job would silently stop running. A format coarser than the schedule
 * (yyyy-MM-dd for an hourly job) is allowed: that is how "once a day, tried every hour" is said.
 */
export function validateWindowFormat(format: string, tz = 'UTC'): void {
  const expected = "Expected `--window-format` to be a luxon format like yyyy-MM-dd or yyyy-MM-dd'T'HH:mm";
  // Two instants differing in every field (weekday, meridiem, zone and offset included): only a
  // format without tokens renders both alike.
  const a = windowKey(DateTime.fromISO('2001-02-03T04:05:06.007Z', { zone: 'UTC' }), { format });
  const b = windowKey(DateTime.fromISO('2012-11-25T07:48:37.891Z', { zone: 'Asia/Kolkata' }), { format });
  if (a === '') throw new UsageError(`${expected}, got \`${format}\`: it gives an empty window key.`);
  if (a === b) {
    throw new UsageError(
      `${expected}, got \`${format}\`: it has no date or time token, so every occurrence would get the same window key.`,
    );
  }
  // Each key must cover one unbroken stretch of time: seen again after a different key, it recurs.
  // In the job's zone, as its keys will be: a zone name or offset alone (ZZ, z) is constant
  // there, or alternates with DST.
  const firstSeen = new Map<string, DateTime>();
  const far: Array<{ at: DateTime; key: string }> = [];
  let previous: string | undefined;
  for (const at of probes(tz)) {
    const key = windowKey(at, { format });
    if (at.year >= FAR_PROBE_YEAR) far.push({ at, key });
    const earlier = firstSeen.get(key);
    if (earlier !== undefined && key !== previous) {
      throw new UsageError(
        `${expected}, got \`${format}\`: its keys recur (${iso(earlier)} and ${iso(at)} both give ${JSON.stringify(key)}), ` +
          'so a later occurrence would find its window already completed and not run; include every ' +
          "larger field, from the year down, as yyyy-MM-dd'T'HH:mm does.",
      );
    }
    if (earlier === undefined) firstSeen.set(key, at);
    previous = key;
  }
  if (firstSeen.size === 1) {
    throw new UsageError(
      `${expected}, got \`${format}\`: in ${tz} it gives every occurrence the same window key ` +
        `(${JSON.stringify(previous)}), so the job would run once and never again.`,
    );
  }
  // Years apart, in the calendar's cycle: a format naming the year gives three keys. One whose
  // keys differ from 2001's only because the zone's rules changed since (ZZ in Pacific/Apia)
  // gives the same key to every occurrence from now on.
  for (const [i, j] of [
    [0, 1],
    [1, 2],
    [0, 2],
  ] as const) {
    if (far[i]!.key !== far[j]!.key) continue;
    throw new UsageError(
      `${expected}, got \`${format}\`: its keys recur (${far[i]!.at.toISODate()} and ` +
        `${far[j]!.at.toISODate()} both give ${JSON.stringify(far[i]!.key)} in ${tz}), ` +
        'so a later occurrence would find its window already completed and not run; include every ' +
        "larger field, from the year down, as yyyy-MM-dd'T'HH:mm does.",
    );
  }
}

function iso(at: DateTime): string {
  return at.toISO({ suppressMilliseconds: true })!;
}

/**
 * A `--scheduled-time` that is not a tick of `--schedule` would claim a window of its own, one
 * no other trigger of that occurrence names: the job could run twice for it.
 */
function checkIsTick(schedule: Schedule, at: DateTime, text: string): void {
  const around = offTick(schedule, at);
  if (around === undefined) return;
  throw new UsageError(
    `Expected \`--scheduled-time\` to be an occurrence of \`--schedule\` ` +
      `${JSON.stringify(schedule.expression)} in ${schedule.tz}, got \`${text}\`; ` +
      `the occurrences around it are ${around}.`,
  );
}

/**
 * The CronJob controller names a Job after its scheduled minute in the CronJob's own timeZone: a
 * minute that is no tick of --schedule in --tz means the two zones differ, or the Job was made by
 * hand with digits at the end of its name (x-20261130, read as unix minutes: 2008). Either way
 * the window it would name is one `check` never expects: refused, as --scheduled-time is.
 */
function checkJobNameIsTick(schedule: Schedule, at: DateTime, jobName: string): void {
  const around = offTick(schedule, at);
  if (around === undefined) return;
  throw new UsageError(
    `the Kubernetes JOB_NAME ${jobName} names the scheduled minute ${iso(at)}, which is not an occurrence of \`--schedule\` ` +
      `${JSON.stringify(schedule.expression)} in ${schedule.tz} (the occurrences around it are ` +
      `${around}). If the CronJob has a timeZone, ` +
      'give the same one as `--tz`; a Job created by hand needs a name that does not end in digits (x-manual), or `--scheduled-time`. ' +
      `If \`--tz\` is the CronJob's timeZone already, the controller's time zone rules differ from ` +
      `this Node's (tzdata ${process.versions.tz ?? 'unknown'}): update one or the other.`,
  );
}

/** Undefined when `at` is a tick of `schedule`; else the ticks either side of it, for a message. */
function offTick(schedule: Schedule, at: DateTime): string | undefined {
  const previous = previousTick(schedule, at.toJSDate());
  if (previous.toMillis() === at.toMillis()) return undefined;
  return `${iso(previous)} and ${iso(nextTick(schedule, at.toJSDate()))}`;
}

/**
 * An occurrence that has not come yet would be claimed, and completed, before its time: when it
 * does come, its run finds the window done and does nothing. Refused rather than guessed at.
 */
function checkNotAhead(at: DateTime, now: Date, what: string, literalWindow: boolean): void {
  // Within the hour, the runner judges it by the database clock once connected: a node's clock
  // behind the controller's must not fail every Job.
  if (at.toMillis() <= now.getTime() + MAX_AHEAD_OF_HOST_MS) return;
  const advice = literalWindow
    ? 'With a literal `--window`, leave `--scheduled-time` out to run it now (it only feeds ' +
      "`--max-delay` and LEASEJOB_SCHEDULED_AT), or check this host's clock."
    : "Use a literal `--window` to run something ahead on purpose, or check this host's clock.";
  throw new UsageError(
    `${what} names an occurrence that has not come yet (${iso(at)}, this host's clock says ` +
      `${iso(DateTime.fromJSDate(now, { zone: at.zone }))}); ` +
      `running it now would mark that window done before its time. ${advice}`,
  );
}

function parseScheduledTime(text: string): DateTime {
  const trimmed = text.trim();
  // Without an offset the instant would depend on the host's zone, the very thing we must not guess.
  const hasOffset = /T.*(?:Z|[+-]\d{2}(?::?\d{2})?)$/i.test(trimmed);
  const parsed = DateTime.fromISO(trimmed, { setZone: true });
  if (!hasOffset || !parsed.isValid) {
    throw new UsageError(
      `Expected \`--scheduled-time\` to be an ISO-8601 time with an offset like ` +
        `2026-11-30T00:05:00-03:00 or 2026-11-30T03:05:00Z, got \`${text}\`.`,
    );
  }
  return parsed;
}
