// Cron schedules in an IANA zone: validation, and the exact instants they fire at across DST changes.
//
// Works around cron-parser 5.10, whose own DST handling gives answers that depend on the
// direction of the walk: `prev()` skips a tick that `next()` shifts out of a spring-forward gap
// (`30 2 * * *`, New York, 2026-03-08), returns a repeated 01:30 that `next()` does not, and throws
// "loop limit exceeded" from America/Sao_Paulo on 2018-11-06 for `5 0 * * *` (gap at midnight).
// So cron-parser only matches wall-clock times here, in UTC where there is no DST, and this module
// turns each wall time into instants itself, by one rule that both directions share:
//
// - a wall time that exists once is that instant;
// - a wall time in a spring-forward gap fires at the instant the gap ends (02:30 -> 03:00 EDT), as
//   cron (Vixie, cronie) runs the skipped jobs right after the change; shifting by the gap length
//   (03:30, luxon's and cron-parser's choice) would make a crontab run fired at 03:00 look like the
//   previous day's occurrence. Gap times landing on the same instant are one tick.
// - a wall time in a fall-back repeated hour fires at both instants (01:30 EDT and 01:30 EST), as the
//   Kubernetes CronJob controller does; they are distinct occurrences with distinct ISO keys, and a
//   date-only `--window-format` folds them into one window.
import { CronExpressionParser } from 'cron-parser';
import { DateTime, FixedOffsetZone, IANAZone, type Zone } from 'luxon';
import { UsageError } from '../errors.js';

export interface Schedule {
  /** Five cron fields or a macro, whitespace normalised; what `jobs.schedule` stores. */
  readonly expression: string;
  /** IANA zone the wall-clock fields are read in. */
  readonly tz: string;
}

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

const MACROS: Readonly<Record<string, string>> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
};

/**
 * The zone named `tz`, undefined when there is none. UTC is luxon's fixed zone: an IANA zone
 * asks Intl for every offset, and the first such question loads ICU's zone data (a noticeable
 * part of a start). IANAZone.create caches one zone per name; isValidZone would build a formatter per call.
 * Names only: Intl accepts offsets like `+03:00` as zones on newer Node (24; not on Node 20), and
 * runners of one job on different Node versions must agree on what its zone is.
 */
function zoneOf(tz: string): Zone | undefined {
  if (canonicalZone(tz) === 'UTC') return FixedOffsetZone.utcInstance;
  if (!/^[A-Za-z]/.test(tz)) return undefined;
  const zone = IANAZone.create(tz);
  return zone.isValid ? zone : undefined;
}

/**
 * The names of UTC and of GMT (IANA's aliases of both, any case): one zone for window keys.
 * Luxon writes UTC's instants with `Z` and an IANA zone's with `+00:00`, so `--tz UTC` on one
 * host and `--tz Etc/UTC` (the chart's default) on another would give one occurrence two keys,
 * and run it twice.
 */
const UTC_NAMES = new Set([
  'utc',
  'etc/utc',
  'uct',
  'etc/uct',
  'universal',
  'etc/universal',
  'zulu',
  'etc/zulu',
  'gmt',
  'etc/gmt',
  'gmt0',
  'etc/gmt0',
  'gmt+0',
  'etc/gmt+0',
  'gmt-0',
  'etc/gmt-0',
  'greenwich',
  'etc/greenwich',
]);

/** `UTC` for every name of UTC or GMT; any other zone name as given. */
export function canonicalZone(tz: string): string {
  return UTC_NAMES.has(tz.toLowerCase()) ? 'UTC' : tz;
}

export function validateZone(tz: string): void {
  if (zoneOf(tz) === undefined) {
    throw new UsageError(`Expected \`--tz\` to be an IANA time zone like America/Sao_Paulo or UTC, got \`${tz}\`.`);
  }
}

export function parseSchedule(expression: string, tz: string): Schedule {
  validateZone(tz);
  const normalized = expression.trim().split(/\s+/).join(' ');
  const problem = cronProblem(normalized);
  if (problem !== undefined) {
    throw new UsageError(
      'Expected `--schedule` to be 5 cron fields (minute hour day-of-month month day-of-week) like `5 0 * * *`, ' +
        `or @hourly, @daily, @weekly, @monthly, @yearly, got \`${expression}\`${problem.why}.`,
      { cause: problem.cause },
    );
  }
  return { expression: normalized, tz: canonicalZone(tz) };
}

/** The latest tick at or before `at` (a tick exactly at `at` counts), in the schedule's zone. */
export function previousTick(s: Schedule, at: Date): DateTime {
  return DateTime.fromMillis(scan(s, at.getTime(), -1), { zone: s.tz });
}

/**
 * The ticks at or before `at`, newest first, at most `max`, down to `since` (the first one
 * whatever `since`): previousTick's answers, from one walk of wall times. Each scan parses the
 * expression anew and walks out from its start, a third of a status call's time over a few
 * minutely schedules (the monitor bench); where the offset changes within a day of a tick, that
 * tick's predecessor is scanned as previousTick scans it, so the DST rule above holds unchanged.
 */
export function previousTicks(s: Schedule, at: Date, since: number, max: number): number[] {
  const zone = zoneOf(s.tz)!;
  const ticks = [scan(s, at.getTime(), -1)];
  let walls: ReturnType<typeof wallIterator> | undefined;
  while (ticks.length < max) {
    const last = ticks[ticks.length - 1]!;
    let tick: number | undefined;
    if (offsetJump(zone, last) === 0) {
      // cron-parser's prev() is exclusive: the wall time before the last tick's.
      walls ??= wallIterator(s, wallTime(zone, last));
      const instants = instantsOf(zone, walls.prev().getTime());
      const candidate = instants[instants.length - 1]!;
      if (instants.length === 1 && candidate < last && offsetJump(zone, candidate) === 0) tick = candidate;
    }
    if (tick === undefined) {
      tick = scan(s, last - 1, -1);
      walls = undefined;
    }
    if (tick < since || tick >= last) break;
    ticks.push(tick);
  }
  return ticks;
}

/** The first tick strictly after `after`, in the schedule's zone. */
export function nextTick(s: Schedule, after: Date): DateTime {
  return DateTime.fromMillis(scan(s, after.getTime(), 1), { zone: s.tz });
}

/**
 * Milliseconds between the tick at or before `at` and the one after it, measured on the wall
 * clock so a DST change does not make a daily schedule look like 23 or 25 hours.
 */
export function typicalInterval(s: Schedule, at: Date): number {
  const walls = wallIterator(s, wallTime(zoneOf(s.tz)!, at.getTime()) + 1);
  const previous = walls.prev().getTime();
  return walls.next().getTime() - previous;
}

function cronProblem(expression: string): { why: string; cause?: unknown } | undefined {
  const fields = cronFields({ expression, tz: 'UTC' });
  if (fields === undefined) return { why: expression.startsWith('@') ? ' (unknown macro)' : '' };
  const count = fields === '' ? 0 : fields.split(' ').length;
  if (count > 5) return { why: ` (${count} fields: seconds and years are not supported)` };
  if (count < 5) return { why: count === 0 ? '' : ` (${count} fields)` };
  // `H` is random per parse unless seeded: two hosts would disagree on the occurrence.
  if (/(?<![a-z])h(?![a-z])/i.test(fields)) return { why: ' (the random `H` value is not supported)' };
  try {
    // A schedule that can never fire (`0 0 30 2 *`) fails here rather than on every run.
    CronExpressionParser.parse(fields, { tz: 'UTC', currentDate: new Date(0) }).next();
  } catch (cause) {
    return { why: ` (${cause instanceof Error ? cause.message : String(cause)})`, cause };
  }
  return undefined;
}

function cronFields(s: Schedule): string | undefined {
  if (s.expression.startsWith('@')) return MACROS[s.expression];
  return s.expression;
}

function wallIterator(s: Schedule, wall: number) {
  const fields = cronFields(s);
  if (fields === undefined) throw new UsageError(`Unknown schedule macro \`${s.expression}\`.`);
  return CronExpressionParser.parse(fields, { tz: 'UTC', currentDate: new Date(wall) });
}

/** The zone's wall clock at `instant`, encoded as a UTC timestamp. */
function wallTime(zone: Zone, instant: number): number {
  return instant + zone.offset(instant) * MINUTE;
}

/**
 * Walks wall times outward from `at` and keeps the closest tick past it (direction 1: strictly
 * after; -1: at or before). Near a fall-back, wall order is not instant order, so the walk starts
 * and goes on as far as the offset changes there; elsewhere it stops at the first fitting tick.
 */
function scan(s: Schedule, at: number, direction: 1 | -1): number {
  if (!Number.isFinite(at)) throw new RangeError('Invalid date');
  const zone = zoneOf(s.tz)!;
  // +1 ms going back: cron-parser's prev() is exclusive, and a tick exactly at `at` counts.
  const start = wallTime(zone, at) - direction * offsetJump(zone, at) + (direction < 0 ? 1 : 0);
  const walls = wallIterator(s, start);
  let best: number | undefined;
  let stopAfterWall = 0;
  for (;;) {
    const wall = (direction > 0 ? walls.next() : walls.prev()).getTime();
    if (best !== undefined && direction * (wall - stopAfterWall) > 0) return best;
    for (const instant of instantsOf(zone, wall)) {
      const fits = direction > 0 ? instant > at : instant <= at;
      if (fits && (best === undefined || direction * (instant - best) < 0)) {
        best = instant;
        stopAfterWall = wall + direction * offsetJump(zone, instant);
      }
    }
  }
}

/** How far wall order can disagree with instant order near `instant`: 0 unless the offset changes within a day. */
function offsetJump(zone: Zone, instant: number): number {
  const offsets = [zone.offset(instant - DAY), zone.offset(instant), zone.offset(instant + DAY)];
  return (Math.max(...offsets) - Math.min(...offsets)) * MINUTE;
}

/** Instants at which the zone's wall clock reads `wall`, by the rule in the header. */
function instantsOf(zone: Zone, wall: number): number[] {
  // Offsets a day either side cover any transition within reach (offsets span -12h..+14h).
  const offsets = new Set([zone.offset(wall - DAY), zone.offset(wall), zone.offset(wall + DAY)]);
  const candidates = [...offsets].map((offset) => wall - offset * MINUTE);
  const instants = candidates.filter((instant) => wallTime(zone, instant) === wall);
  if (instants.length > 0) return [...new Set(instants)].sort((a, b) => a - b);
  // In a gap: the transition lies between the two readings; find its first instant.
  let before = Math.min(...candidates);
  let after = Math.max(...candidates);
  const offsetBefore = zone.offset(before);
  while (after - before > 1) {
    const middle = Math.floor((before + after) / 2);
    if (zone.offset(middle) === offsetBefore) before = middle;
    else after = middle;
  }
  return [after];
}
