// `run` options: every default in one place, every flag validated next to its rule, messages
// in one pattern ("Expected `--flag` to be ..., got `value`.").
import type { RunAs } from '../lease/child.js';
import { resolveRunAs } from './run-as.js';
import type { DateTime } from 'luxon';
import { DEFAULTS } from '../defaults.js';
import { MAX_TIMER_MS, parseDuration, parseDurationRange, parseIsoOffset } from '../schedule/duration.js';
import { UsageError } from '../errors.js';
import { safetyMarginMs, stopAfterMs } from '../lease/keeper.js';
import { resolveLogLevel } from './log-level.js';
import { resolveLogFormat } from './log-format.js';
import { validateFormattedWindowKey, validateName, validateSchema, validateWindowKey } from '../names.js';
import { deriveOccurrence, validateWindowFormat, windowKey, type OccurrenceSource } from '../schedule/occurrence.js';
import type { OnBusy } from '../lease/types.js';
import { parseRecordOutputSize } from '../lease/output-tail.js';
import { canonicalZone, parseSchedule, typicalInterval, validateZone, type Schedule } from '../schedule/cron.js';
import { MAX_CATCH_UP_TICKS, type CatchUpSettings } from '../lease/catch-up.js';
import type { WindowNaming } from '../schedule/window-range.js';
import { attemptPolicy, defaultBudget, type AttemptPolicy } from './policies.js';
import { traceLinkTemplate } from '../monitor/trace-link.js';

/** Raw flags as commander hands them over. */
export interface RawRunFlags {
  name?: string;
  schedule?: string;
  tz?: string;
  windowFromSchedule?: boolean;
  window?: string;
  scheduledTime?: string;
  windowFormat?: string;
  windowOffset?: string;
  ttl?: string;
  killGrace?: string;
  onBusy?: string;
  waitTimeout?: string;
  maxRuntime?: string;
  maxDelay?: string;
  alertAfter?: string;
  alertLookback?: string;
  expectDuration?: string;
  rerun?: boolean;
  databaseUrl?: string;
  databaseUrlFile?: string;
  schema?: string;
  logLevel?: string;
  logFormat?: string;
  mutexOnly?: boolean;
  passDatabaseUrl?: boolean;
  user?: string;
  group?: string;
  pingUrl?: string;
  notifyUrl?: string;
  traceLinkTemplate?: string;
  recordOutput?: string | boolean;
  catchUp?: string;
  catchUpLimit?: string;
  maxAttempts?: string;
  retries?: string;
  retryDelay?: string;
}

export interface RunConfig {
  name: string;
  command: string;
  args: string[];
  ttlMs: number;
  renewIntervalMs: number;
  killGraceMs: number;
  onBusy: OnBusy;
  waitTimeoutMs?: number | undefined;
  maxRuntimeMs?: number | undefined;
  schedule?: Schedule | undefined;
  tz: string;
  window?:
    | {
        key: string;
        scheduledAt?: Date | undefined;
        source: OccurrenceSource | 'literal';
        rerun: boolean;
        maxDelayMs?: number | undefined;
      }
    | undefined;
  spec: Record<string, string | number | null>;
  databaseUrl?: string | undefined;
  schema: string;
  logLevel: string;
  /** json, or lines for a person (--log-format, LEASEJOB_LOG_FORMAT, a terminal on stderr). */
  logFormat: 'json' | 'pretty';
  /** --schedule without a window and without --mutex-only: no once-per-occurrence protection, said once. */
  scheduleWithoutWindow: boolean;
  passDatabaseUrl: boolean;
  /** --user, --group: the child's user and group. */
  runAs?: RunAs | undefined;
  /** healthchecks.io-style ping URL (a secret: never logged, never recorded). */
  pingUrl?: string | undefined;
  /** Webhook for failed, lost and missed windows (a secret likewise). */
  notifyUrl?: string | undefined;
  /** --trace-link-template: the webhook's trace_url (monitor/trace-link.ts). */
  traceLinkTemplate?: string | undefined;
  /** --record-output: how many bytes of the child's output to keep. */
  recordOutputBytes?: number | undefined;
  /** --catch-up: the earlier occurrences to look for, and how the job names its windows. */
  catchUp?: (CatchUpSettings & { naming: WindowNaming }) | undefined;
  /** The occurrence policies (policies.ts): the attempt budget and the retries. */
  policy: AttemptPolicy;
}

const ON_BUSY: readonly OnBusy[] = ['skip', 'wait', 'fail', 'replace'];

export function normalizeRunOptions(
  flags: RawRunFlags,
  command: string[],
  env: NodeJS.ProcessEnv = process.env,
  now: Date = new Date(),
): RunConfig {
  const name = validateName(flags.name);
  const [cmd, ...args] = command;
  if (cmd === undefined || cmd === '') {
    throw new UsageError('Expected a command after `--`, as in `leasejob run --name job -- node job.js`, got none.');
  }
  const schema = validateSchema(flags.schema ?? DEFAULTS.schema);
  const logLevel = resolveLogLevel(flags.logLevel, env);
  const logFormat = resolveLogFormat(flags.logFormat, env);
  const timing = leaseTiming(flags);
  const busy = busyAndRuntime(flags);
  const delays = delaysAndAlerts(flags);

  const tz = canonicalZone(flags.tz ?? DEFAULTS.tz);
  validateZone(tz);
  const schedule = flags.schedule !== undefined ? parseSchedule(flags.schedule, tz) : undefined;
  checkWindowFlags(flags, delays.maxDelayMs);
  const catchUp = catchUpSettings(flags, schedule, now);
  const window = runWindow(flags, { schedule, tz, env, now, maxDelayMs: delays.maxDelayMs });
  const policy = defaultBudget(
    attemptPolicy(flags, flags.window !== undefined || !!flags.windowFromSchedule),
    flags,
    window?.source,
  );
  // Replace compares occurrences: without a time there is no "earlier" to stop.
  if (busy.onBusy === 'replace' && (window?.scheduledAt === undefined || catchUp !== undefined))
    throw new UsageError(
      '`--on-busy replace` needs one occurrence with a time: `--window-from-schedule` (or `--window` with ' +
        '`--scheduled-time`), without `--catch-up`.',
    );

  const pingUrl = hookUrl(flags.pingUrl ?? nonEmpty(env.LEASEJOB_PING_URL), '--ping-url', 'LEASEJOB_PING_URL');
  const notifyUrl = hookUrl(
    flags.notifyUrl ?? nonEmpty(env.LEASEJOB_NOTIFY_URL),
    '--notify-url',
    'LEASEJOB_NOTIFY_URL',
  );
  const recordOutputBytes = parseRecordOutputSize(flags.recordOutput);

  return {
    pingUrl,
    notifyUrl,
    traceLinkTemplate: traceLinkTemplate(flags.traceLinkTemplate, env),
    recordOutputBytes,
    name,
    command: cmd,
    args,
    ...timing,
    ...busy,
    schedule,
    tz,
    window,
    spec: registrySpec(flags, tz, delays),
    databaseUrl: flags.databaseUrl,
    schema,
    logLevel,
    logFormat,
    scheduleWithoutWindow: schedule !== undefined && window === undefined && !flags.mutexOnly,
    passDatabaseUrl: !!flags.passDatabaseUrl,
    runAs: resolveRunAs(flags.user, flags.group),
    policy,
    catchUp:
      catchUp && schedule
        ? {
            ...catchUp,
            naming: {
              schedule,
              format: flags.windowFormat,
              offset:
                flags.windowOffset !== undefined ? parseIsoOffset(flags.windowOffset, '--window-offset') : undefined,
            },
          }
        : undefined,
  };
}

/** --ttl and --kill-grace, checked against each other: a failed renewal must leave time to stop the child. */
function leaseTiming(flags: RawRunFlags): { ttlMs: number; renewIntervalMs: number; killGraceMs: number } {
  const ttlMs = parseDuration(flags.ttl ?? DEFAULTS.ttl, '--ttl');
  const renewIntervalMs = Math.floor(ttlMs / 3);
  if (ttlMs < 1_500)
    throw new UsageError(
      `Expected \`--ttl\` to be at least 1.5s (renewals every TTL/3 need room), got \`${flags.ttl}\`.`,
    );
  if (ttlMs > 24 * 3600_000)
    throw new UsageError(
      `Expected \`--ttl\` to be at most 24h (a dead owner would block the job that long), got \`${flags.ttl}\`.`,
    );
  // Unset, the grace fits the TTL: 10s, or half of what is left after a renewal and the margin.
  const killGraceMs =
    flags.killGrace !== undefined
      ? parseDuration(flags.killGrace, '--kill-grace')
      : Math.min(
          parseDuration(DEFAULTS.killGrace, '--kill-grace'),
          Math.floor((ttlMs - renewIntervalMs - safetyMarginMs(ttlMs)) / 2),
        );
  if (stopAfterMs({ ttlMs, renewIntervalMs, killGraceMs }) <= renewIntervalMs) {
    const max = ttlMs - renewIntervalMs - safetyMarginMs(ttlMs);
    throw new UsageError(
      `Expected \`--kill-grace\` to be below ${max}ms so that a failed renewal at TTL/3 still leaves time to stop the child ` +
        `before \`--ttl\` ${flags.ttl ?? DEFAULTS.ttl} expires, got \`${flags.killGrace ?? DEFAULTS.killGrace}\`; ` +
        'raise --ttl or lower --kill-grace.',
    );
  }
  return { ttlMs, renewIntervalMs, killGraceMs };
}

/** --on-busy, --wait-timeout and --max-runtime. */
function busyAndRuntime(flags: RawRunFlags): {
  onBusy: OnBusy;
  waitTimeoutMs: number | undefined;
  maxRuntimeMs: number | undefined;
} {
  const onBusy = (flags.onBusy ?? DEFAULTS.onBusy) as OnBusy;
  if (!ON_BUSY.includes(onBusy))
    throw new UsageError(`Expected \`--on-busy\` to be one of skip, wait, fail, replace, got \`${flags.onBusy}\`.`);
  const waitTimeoutMs =
    flags.waitTimeout !== undefined ? parseDuration(flags.waitTimeout, '--wait-timeout') : undefined;
  if (waitTimeoutMs !== undefined && onBusy !== 'wait' && onBusy !== 'replace')
    throw new UsageError('`--wait-timeout` only applies with `--on-busy wait` or `--on-busy replace`.');
  const maxRuntimeMs = flags.maxRuntime !== undefined ? parseDuration(flags.maxRuntime, '--max-runtime') : undefined;
  // A timer past Node's limit fires at once: 30d would kill the child as it starts.
  if (maxRuntimeMs !== undefined && maxRuntimeMs > MAX_TIMER_MS) {
    throw new UsageError(
      `\`--max-runtime\` is at most 24 days (Node's timer limit), got \`${flags.maxRuntime}\`; leave it out for no limit.`,
    );
  }
  return { onBusy, waitTimeoutMs, maxRuntimeMs };
}

interface Delays {
  maxDelayMs: number | undefined;
  alertAfterMs: number | undefined;
  alertLookbackMs: number | undefined;
  expect: ReturnType<typeof parseDurationRange> | undefined;
}

/** --max-delay, --alert-after, --alert-lookback and --expect-duration. */
function delaysAndAlerts(flags: RawRunFlags): Delays {
  const maxDelayMs = flags.maxDelay !== undefined ? parseDuration(flags.maxDelay, '--max-delay') : undefined;
  const alertAfterMs = flags.alertAfter !== undefined ? parseDuration(flags.alertAfter, '--alert-after') : undefined;
  const alertLookbackMs =
    flags.alertLookback !== undefined ? parseDuration(flags.alertLookback, '--alert-lookback') : undefined;
  // Occurrences are judged once past their grace: a lookback inside the grace would judge none
  // but the latest (which is always judged).
  if (alertLookbackMs !== undefined && alertAfterMs !== undefined && alertLookbackMs < alertAfterMs) {
    throw new UsageError(
      `Expected \`--alert-lookback\` to be at least \`--alert-after\` (${flags.alertAfter}), got \`${flags.alertLookback}\`: ` +
        'an occurrence is judged only once its grace is over.',
    );
  }
  const expect =
    flags.expectDuration !== undefined ? parseDurationRange(flags.expectDuration, '--expect-duration') : undefined;
  return { maxDelayMs, alertAfterMs, alertLookbackMs, expect };
}

/** The window flags that go together, or not at all. */
function checkWindowFlags(flags: RawRunFlags, maxDelayMs: number | undefined): void {
  if (flags.window !== undefined && flags.windowFromSchedule)
    throw new UsageError('Use either `--window` or `--window-from-schedule`, not both.');
  if (flags.mutexOnly && (flags.window !== undefined || flags.windowFromSchedule))
    throw new UsageError(
      '`--mutex-only` runs without a window: use it without `--window` and `--window-from-schedule`, or drop it.',
    );
  if (!flags.windowFromSchedule && (flags.windowFormat !== undefined || flags.windowOffset !== undefined)) {
    throw new UsageError('`--window-format` and `--window-offset` need `--window-from-schedule`.');
  }
  if (flags.window === undefined && !flags.windowFromSchedule && (flags.rerun || maxDelayMs !== undefined)) {
    throw new UsageError('`--rerun` and `--max-delay` need a window: `--window-from-schedule` or `--window`.');
  }
}

interface WindowContext {
  schedule: Schedule | undefined;
  tz: string;
  env: NodeJS.ProcessEnv;
  now: Date;
  maxDelayMs: number | undefined;
}

/** The run's window: a literal --window, the occurrence --window-from-schedule derives, or none. */
function runWindow(flags: RawRunFlags, c: WindowContext): RunConfig['window'] {
  const { schedule, tz, now, maxDelayMs } = c;
  if (flags.window !== undefined) {
    const scheduledAt =
      flags.scheduledTime !== undefined
        ? deriveOccurrence({
            scheduledTime: flags.scheduledTime,
            schedule,
            tz,
            now,
            literalWindow: true,
          })?.scheduledAt.toJSDate()
        : undefined;
    if (maxDelayMs !== undefined && scheduledAt === undefined)
      throw new UsageError('`--max-delay` with a literal `--window` needs `--scheduled-time`.');
    return { key: validateWindowKey(flags.window), scheduledAt, source: 'literal', rerun: !!flags.rerun, maxDelayMs };
  }
  if (flags.windowFromSchedule) {
    if (flags.windowFormat !== undefined) validateWindowFormat(flags.windowFormat, tz);
    const offset = flags.windowOffset !== undefined ? parseIsoOffset(flags.windowOffset, '--window-offset') : undefined;
    // JOB_NAME only inside Kubernetes: CI systems (Jenkins) set it too, to names that may end in digits.
    const jobName = c.env.KUBERNETES_SERVICE_HOST ? c.env.JOB_NAME : undefined;
    const occ = deriveOccurrence({ scheduledTime: flags.scheduledTime, jobName, schedule, tz, now });
    if (!occ) {
      throw new UsageError(
        '`--window-from-schedule` needs `--schedule` (or `--scheduled-time`, or a Kubernetes JOB_NAME ending in the scheduled minute).',
      );
    }
    const at: DateTime = occ.scheduledAt.setZone(tz);
    const key = windowKey(at, { format: flags.windowFormat, offset });
    return {
      key: validateFormattedWindowKey(key, flags.windowFormat ?? 'ISO-8601'),
      scheduledAt: at.toJSDate(),
      source: occ.source,
      rerun: !!flags.rerun,
      maxDelayMs,
    };
  }
  if (flags.scheduledTime !== undefined)
    throw new UsageError('`--scheduled-time` needs `--window-from-schedule` or `--window`.');
  return undefined;
}

/** What the registry records about the job (the acquire compares it with what other hosts run). */
function registrySpec(flags: RawRunFlags, tz: string, d: Delays): Record<string, string | number | null> {
  return {
    schedule: flags.schedule ?? null,
    tz,
    window_mode: flags.window !== undefined ? 'literal' : flags.windowFromSchedule ? 'schedule' : 'none',
    window_format: flags.windowFormat ?? null,
    window_offset: flags.windowOffset ?? null,
    max_delay_ms: d.maxDelayMs ?? null,
    alert_after_ms: d.alertAfterMs ?? null,
    alert_lookback_ms: d.alertLookbackMs ?? null,
    expect_min_ms: d.expect?.minMs ?? null,
    expect_max_ms: d.expect?.maxMs ?? null,
  };
}

const nonEmpty = (v: string | undefined): string | undefined => (v === undefined || v === '' ? undefined : v);

/** An http(s) URL. The message never quotes it: it is a secret (its path names the check). */
function hookUrl(value: string | undefined, flag: string, envName: string): string | undefined {
  if (value === undefined) return undefined;
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw new UsageError(
      `Expected \`${flag}\` (or ${envName}) to be an http:// or https:// URL, got one that is not (not shown: it may hold a secret).`,
    );
  }
  return url.href;
}

/**
 * What a ping or webhook URL would show in a log line: the URL itself and its path (a check's
 * UUID, a ping key), for the logger to mask like a database password.
 */
export function hookSecrets(urls: ReadonlyArray<string | undefined>): string[] {
  const out: string[] = [];
  for (const u of urls) {
    if (u === undefined) continue;
    const url = new URL(u);
    out.push(u, url.href, `${url.host}${url.pathname}`);
    if (url.pathname.length > 1) out.push(url.pathname);
    if (url.search.length > 1) out.push(url.search.slice(1));
    if (url.password) out.push(url.password);
    // A check's UUID or slug key alone (long enough never to be a word of a log line).
    for (const part of url.pathname.split('/')) if (part.length >= 16) out.push(part);
  }
  for (const s of [...out]) out.push(JSON.stringify(s).slice(1, -1));
  return [...new Set(out.filter((s) => s.length > 0))];
}

/** What a run's logger masks: the store's secrets, and the ping and webhook URLs when given. */
export function runSecrets(config: Pick<RunConfig, 'pingUrl' | 'notifyUrl'>, storeSecrets: string[]): string[] {
  const urls = [config.pingUrl, config.notifyUrl];
  return urls.some((u) => u !== undefined) ? [...storeSecrets, ...hookSecrets(urls)] : storeSecrets;
}

/** The most earlier windows one run may catch up (each is a run of the command). */
export const MAX_CATCH_UP_LIMIT = 1_000;
export const DEFAULT_CATCH_UP_LIMIT = 10;

/** A positive whole number of at most `max`, for `flag`. */
export function parseCount(text: string, flag: string, max: number): number {
  const n = /^\s*\d+\s*$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > max)
    throw new UsageError(`Expected \`${flag}\` to be a whole number from 1 to ${max}, got \`${text}\`.`);
  return n;
}

function catchUpSettings(flags: RawRunFlags, schedule: Schedule | undefined, now: Date): CatchUpSettings | undefined {
  if (flags.catchUp === undefined) {
    if (flags.catchUpLimit !== undefined) throw new UsageError('`--catch-up-limit` needs `--catch-up <duration>`.');
    return undefined;
  }
  if (schedule === undefined || !flags.windowFromSchedule) {
    throw new UsageError(
      '`--catch-up` needs `--schedule` and `--window-from-schedule`: the earlier occurrences come ' +
        'from the schedule, and each is its own window.',
    );
  }
  const windowMs = parseDuration(flags.catchUp, '--catch-up');
  if (windowMs <= 0)
    throw new UsageError(`Expected \`--catch-up\` to be a positive duration like 3h or 2d, got \`${flags.catchUp}\`.`);
  const spans = Math.ceil(windowMs / typicalInterval(schedule, now));
  if (spans > MAX_CATCH_UP_TICKS) {
    throw new UsageError(
      `Expected \`--catch-up\` to span at most ${MAX_CATCH_UP_TICKS} occurrences of \`--schedule\`, ` +
        `got \`${flags.catchUp}\` (about ${spans}); ` +
        'shorten it, or use `leasejob backfill` for a long range.',
    );
  }
  const limit =
    flags.catchUpLimit !== undefined
      ? parseCount(flags.catchUpLimit, '--catch-up-limit', MAX_CATCH_UP_LIMIT)
      : DEFAULT_CATCH_UP_LIMIT;
  return { windowMs, limit };
}
