// Duration flags (`--ttl`, `--kill-grace`, `--window-offset`, ...): parsing and short display.
import { Duration } from 'luxon';
import { UsageError } from '../errors.js';

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/** Anything longer is a typo (`90d` for `90s`), not a lease TTL or timeout anyone means. */
const MAX_DURATION_MS = 366 * DAY;

const UNIT_MS = { d: DAY, h: HOUR, m: MINUTE, s: SECOND, ms: 1 } as const;
type Unit = keyof typeof UNIT_MS;
const UNITS: readonly Unit[] = ['d', 'h', 'm', 's', 'ms'];

/** `500ms`, `90s`, `1h30m`, `1.5s`, or ISO-8601 (`PT90S`, `P1D`); returns milliseconds. */
export function parseDuration(text: string, flag: string, maxMs = MAX_DURATION_MS): number {
  const trimmed = text.trim();
  const raw =
    trimmed.startsWith('P') || trimmed.startsWith('-P') ? isoMillis(trimmed) : shortMillis(trimmed.replace(/^-/, ''));
  if (raw === undefined)
    throw new UsageError(`Expected \`${flag}\` to be a duration like 90s, 2m or PT90S, got \`${text}\`.`);
  const ms = Math.round(trimmed.startsWith('-') && !trimmed.startsWith('-P') ? -raw : raw);
  if (!(ms >= 1))
    throw new UsageError(`Expected \`${flag}\` to be a positive duration like 90s, 2m or PT90S, got \`${text}\`.`);
  if (ms > maxMs) {
    throw new UsageError(
      `Expected \`${flag}\` to be a duration of at most ${Math.round(maxMs / DAY)} days, like 90s, 2m or PT90S, got \`${text}\`.`,
    );
  }
  return ms;
}

/**
 * `--expect-duration <min>..<max>`: the bounds a run is expected within; either side may be left
 * out (`30s..`, `..2h`), not both, and min must not exceed max. Milliseconds, null for an open side.
 */
export function parseDurationRange(text: string, flag: string): { minMs: number | null; maxMs: number | null } {
  const parts = text.split('..');
  const [min, max] = parts.map((p) => p.trim());
  if (parts.length !== 2 || (min === '' && max === ''))
    throw new UsageError(
      `Expected \`${flag}\` to be <min>..<max> (either may be left out), like 30s..10m, 1m.. or ..2h, got \`${text}\`.`,
    );
  const minMs = min ? parseDuration(min, flag) : null;
  const maxMs = max ? parseDuration(max, flag) : null;
  if (minMs !== null && maxMs !== null && minMs > maxMs)
    throw new UsageError(`Expected \`${flag}\`'s minimum to be at most its maximum, got \`${text}\`.`);
  return { minMs, maxMs };
}

/**
 * `--window-offset`: a signed duration, ISO-8601 (`-P1D`, `-PT1H`, `P1D`; luxon accepts the
 * leading `-` itself) or short (`-1d`, `1d`, `-2h`, `-1d12h`), as every other duration flag
 * takes. Units are kept as written so that `P1D` and `1d` stay one calendar day when added in a
 * zone (23 or 25 hours across DST), unlike `PT24H` or `24h`.
 */
export function parseIsoOffset(text: string, flag: string): Duration {
  const trimmed = text.trim();
  const duration = /^-?P/.test(trimmed) ? Duration.fromISO(trimmed) : shortDuration(trimmed);
  if (duration === undefined || !duration.isValid || !hasUnits(duration)) {
    throw new UsageError(
      `Expected \`${flag}\` to be a duration like -1d, -2h, 1d or -P1D (ISO-8601), got \`${text}\`.`,
    );
  }
  return duration;
}

const UNIT_NAMES = { d: 'days', h: 'hours', m: 'minutes', s: 'seconds', ms: 'milliseconds' } as const;

/** `-1d12h` as luxon units (days stay calendar days), with the sign on every unit; undefined when not one. */
function shortDuration(text: string): Duration | undefined {
  const sign = text.startsWith('-') ? -1 : 1;
  const body = text.replace(/^-/, '');
  if (shortMillis(body) === undefined) return undefined;
  const units: Record<string, number> = {};
  for (const m of body.matchAll(/(\d+(?:\.\d+)?)(ms|d|h|m|s)/g)) units[UNIT_NAMES[m[2] as Unit]] = sign * Number(m[1]);
  return Duration.fromObject(units);
}

function isoMillis(text: string): number | undefined {
  const duration = Duration.fromISO(text);
  // Luxon accepts a bare `P` or `PT` as a valid zero duration.
  return duration.isValid && hasUnits(duration) ? duration.toMillis() : undefined;
}

function shortMillis(text: string): number | undefined {
  const part = /(\d+(?:\.\d+)?)(ms|d|h|m|s)/y;
  let total = 0;
  let previousRank = -1;
  while (part.lastIndex < text.length) {
    const match = part.exec(text);
    if (!match) return undefined;
    const unit = match[2] as Unit;
    const rank = UNITS.indexOf(unit);
    // Units must go largest first and appear once: `30s1m` or `1m1m` is more likely a slip than intent.
    if (rank <= previousRank) return undefined;
    previousRank = rank;
    total += Number(match[1]) * UNIT_MS[unit];
  }
  return text.length > 0 ? total : undefined;
}

function hasUnits(duration: Duration): boolean {
  return Object.keys(duration.toObject()).length > 0;
}

/** The longest delay a Node timer takes (2^31 - 1 ms, 24.8 days); a longer one fires at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** 93s -> "1m33s", negative -> "-1m33s"; null -> "-". */
export function humanMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '-';
  const sign = ms < 0 ? '-' : '';
  let rest = Math.round(Math.abs(ms) / 1000);
  const d = Math.floor(rest / 86400);
  rest %= 86400;
  const h = Math.floor(rest / 3600);
  rest %= 3600;
  const m = Math.floor(rest / 60);
  const s = rest % 60;
  const parts = [d ? `${d}d` : '', h ? `${h}h` : '', m ? `${m}m` : '', s || (!d && !h && !m) ? `${s}s` : ''];
  return sign + parts.join('');
}
