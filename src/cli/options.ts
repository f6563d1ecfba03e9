// `run` options: every default in one place, every flag validated next to its rule, messages
// in one pattern ("Expected `--flag` to be ..., got `value`.").
import type { DateTime } from 'luxon';
import { DEFAULTS } from '../defaults.js';
import { MAX_TIMER_MS, parseDuration, parseIsoOffset } from '../schedule/duration.js';
import { UsageError } from '../errors.js';
import { safetyMarginMs, stopAfterMs } from '../lease/keeper.js';
import { resolveLogLevel } from './log-level.js';
import { validateFormattedWindowKey, validateName, validateSchema, validateWindowKey } from '../names.js';
import { deriveOccurrence, validateWindowFormat, windowKey, type OccurrenceSource } from '../schedule/occurrence.js';
import type { OnBusy } from '../lease/runner.js';
import { canonicalZone, parseSchedule, validateZone, type Schedule } from '../schedule/cron.js';

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
  rerun?: boolean;
  databaseUrl?: string;
  schema?: string;
  logLevel?: string;
  passDatabaseUrl?: boolean;
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
  window?: { key: string; scheduledAt?: Date | undefined; source: OccurrenceSource | 'literal'; rerun: boolean; maxDelayMs?: number | undefined } | undefined;
  spec: Record<string, string | number | null>;
  databaseUrl?: string | undefined;
  schema: string;
  logLevel: string;
  passDatabaseUrl: boolean;
}

const ON_BUSY: readonly OnBusy[] = ['skip', 'wait', 'fail'];

export function normalizeRunOptions(flags: RawRunFlags, command: string[], env: NodeJS.ProcessEnv = process.env, now: Date = new Date()): RunConfig {
  const name = validateName(flags.name);
  const [cmd, ...args] = command;
  if (cmd === undefined || cmd === '') {
    throw new UsageError('Expected a command after `--`, as in `leasejob run --name job -- node job.js`, got none.');
  }
  const schema = validateSchema(flags.schema ?? DEFAULTS.schema);
  const logLevel = resolveLogLevel(flags.logLevel, env);

  const ttlMs = parseDuration(flags.ttl ?? DEFAULTS.ttl, '--ttl');
  const renewIntervalMs = Math.floor(ttlMs / 3);
  if (ttlMs < 1_500) throw new UsageError(`Expected \`--ttl\` to be at least 1.5s (renewals every TTL/3 need room), got \`${flags.ttl}\`.`);
  if (ttlMs > 24 * 3600_000) throw new UsageError(`Expected \`--ttl\` to be at most 24h (a dead owner would block the job that long), got \`${flags.ttl}\`.`);
  // Unset, the grace fits the TTL: 10s, or half of what is left after a renewal and the margin.
  const killGraceMs = flags.killGrace !== undefined
    ? parseDuration(flags.killGrace, '--kill-grace')
    : Math.min(parseDuration(DEFAULTS.killGrace, '--kill-grace'), Math.floor((ttlMs - renewIntervalMs - safetyMarginMs(ttlMs)) / 2));
  if (stopAfterMs({ ttlMs, renewIntervalMs, killGraceMs }) <= renewIntervalMs) {
    const max = ttlMs - renewIntervalMs - safetyMarginMs(ttlMs);
    throw new UsageError(
      `Expected \`--kill-grace\` to be below ${max}ms so that a failed renewal at TTL/3 still leaves time to stop the child before \`--ttl\` ${flags.ttl ?? DEFAULTS.ttl} expires, got \`${flags.killGrace ?? DEFAULTS.killGrace}\`; raise --ttl or lower --kill-grace.`,
    );
  }

  const onBusy = (flags.onBusy ?? DEFAULTS.onBusy) as OnBusy;
  if (!ON_BUSY.includes(onBusy)) throw new UsageError(`Expected \`--on-busy\` to be one of skip, wait, fail, got \`${flags.onBusy}\`.`);
  const waitTimeoutMs = flags.waitTimeout !== undefined ? parseDuration(flags.waitTimeout, '--wait-timeout') : undefined;
  if (waitTimeoutMs !== undefined && onBusy !== 'wait') throw new UsageError('`--wait-timeout` only applies with `--on-busy wait`.');
  const maxRuntimeMs = flags.maxRuntime !== undefined ? parseDuration(flags.maxRuntime, '--max-runtime') : undefined;
  // A timer past Node's limit fires at once: 30d would kill the child as it starts.
  if (maxRuntimeMs !== undefined && maxRuntimeMs > MAX_TIMER_MS) {
    throw new UsageError(`\`--max-runtime\` is at most 24 days (Node's timer limit), got \`${flags.maxRuntime}\`; leave it out for no limit.`);
  }
  const maxDelayMs = flags.maxDelay !== undefined ? parseDuration(flags.maxDelay, '--max-delay') : undefined;
  const alertAfterMs = flags.alertAfter !== undefined ? parseDuration(flags.alertAfter, '--alert-after') : undefined;

  const tz = canonicalZone(flags.tz ?? DEFAULTS.tz);
  validateZone(tz);
  const schedule = flags.schedule !== undefined ? parseSchedule(flags.schedule, tz) : undefined;

  if (flags.window !== undefined && flags.windowFromSchedule) throw new UsageError('Use either `--window` or `--window-from-schedule`, not both.');
  if (!flags.windowFromSchedule && (flags.windowFormat !== undefined || flags.windowOffset !== undefined)) {
    throw new UsageError('`--window-format` and `--window-offset` need `--window-from-schedule`.');
  }
  if (flags.window === undefined && !flags.windowFromSchedule && (flags.rerun || maxDelayMs !== undefined)) {
    throw new UsageError('`--rerun` and `--max-delay` need a window: `--window-from-schedule` or `--window`.');
  }

  let window: RunConfig['window'];
  if (flags.window !== undefined) {
    const scheduledAt = flags.scheduledTime !== undefined ? deriveOccurrence({ scheduledTime: flags.scheduledTime, schedule, tz, now, literalWindow: true })?.scheduledAt.toJSDate() : undefined;
    if (maxDelayMs !== undefined && scheduledAt === undefined) throw new UsageError('`--max-delay` with a literal `--window` needs `--scheduled-time`.');
    window = { key: validateWindowKey(flags.window), scheduledAt, source: 'literal', rerun: !!flags.rerun, maxDelayMs };
  } else if (flags.windowFromSchedule) {
    if (flags.windowFormat !== undefined) validateWindowFormat(flags.windowFormat, tz);
    const offset = flags.windowOffset !== undefined ? parseIsoOffset(flags.windowOffset, '--window-offset') : undefined;
    // JOB_NAME only inside Kubernetes: CI systems (Jenkins) set it too, to names that may end in digits.
    const jobName = env.KUBERNETES_SERVICE_HOST ? env.JOB_NAME : undefined;
    const occ = deriveOccurrence({ scheduledTime: flags.scheduledTime, jobName, schedule, tz, now });
    if (!occ) {
      throw new UsageError('`--window-from-schedule` needs `--schedule` (or `--scheduled-time`, or a Kubernetes JOB_NAME ending in the scheduled minute).');
    }
    const at: DateTime = occ.scheduledAt.setZone(tz);
    const key = windowKey(at, { format: flags.windowFormat, offset });
    window = { key: validateFormattedWindowKey(key, flags.windowFormat ?? 'ISO-8601'), scheduledAt: at.toJSDate(), source: occ.source, rerun: !!flags.rerun, maxDelayMs };
  } else if (flags.scheduledTime !== undefined) {
    throw new UsageError('`--scheduled-time` needs `--window-from-schedule` or `--window`.');
  }

  const spec: Record<string, string | number | null> = {
    schedule: flags.schedule ?? null,
    tz,
    window_mode: flags.window !== undefined ? 'literal' : flags.windowFromSchedule ? 'schedule' : 'none',
    window_format: flags.windowFormat ?? null,
    window_offset: flags.windowOffset ?? null,
    max_delay_ms: maxDelayMs ?? null,
    alert_after_ms: alertAfterMs ?? null,
  };

  return {
    name, command: cmd, args, ttlMs, renewIntervalMs, killGraceMs, onBusy, waitTimeoutMs, maxRuntimeMs,
    schedule, tz, window, spec, databaseUrl: flags.databaseUrl, schema, logLevel, passDatabaseUrl: !!flags.passDatabaseUrl,
  };
}
