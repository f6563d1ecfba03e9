// The registry: a run's settings adopted, a change recorded (as sql/functions/register_job.sql).
import type { AcquireInput, JobChange, JobSettings } from '../contract.js';
import type { JobRecord, Sqlite } from './context.js';
import { recordEventSync } from './record-event.js';

/** The registry settings a run sends, in the order register_job compares them. */
const SETTINGS = [
  'schedule',
  'tz',
  'window_mode',
  'window_format',
  'window_offset',
  'ttl_ms',
  'max_delay_ms',
  'alert_after_ms',
  'alert_lookback_ms',
  'expect_min_ms',
  'expect_max_ms',
] as const;

/** The settings that say which occurrences a job has: a change of any is a schedule change. */
const SCHEDULE_SETTINGS = ['schedule', 'tz', 'window_mode', 'window_format', 'window_offset'] as const;

/**
 * As register_job (028): whether the schedule itself changed, an event with an effective time
 * (jobs.schedule_since): an occurrence of the new schedule before it that no run claimed is never
 * due. Not at a first registration (no window mode yet): created_at says the same.
 */
const scheduleMoved = (before: JobSettings, next: JobSettings): boolean =>
  SCHEDULE_SETTINGS.some((k) => before[k] !== next[k]);

/**
 * As register_job (sql/012_versions_pause_mark.sql): unchanged settings write nothing; a run
 * with no schedule settings never erases a registered schedule; a change is adopted, bumps
 * the version, and (when a schedule is involved) is a job-changed event, returned.
 */
export function registerJob(s: Sqlite, i: AcquireInput, now: number): JobChange | undefined {
  const change = registerSettings(s, i, now);
  const from = i.spec?.expected_from_ms;
  if (typeof from === 'number') expectFrom(s, i.job, String(i.spec?.schedule), from);
  return change;
}

/**
 * As register_job (038): `backfill --schedule`, registering the schedule of a job that had none,
 * has its occurrences expected from its range's first one, not from the registration, when the
 * registered schedule is its own (a NULL schedule_since, never changed, stays NULL).
 */
function expectFrom(s: Sqlite, job: string, schedule: string, fromMs: number): void {
  s.db
    .prepare(
      `UPDATE jobs SET created_at = min(created_at, @from),
         schedule_since = CASE WHEN schedule_since IS NULL THEN NULL ELSE min(schedule_since, @from) END
       WHERE name = @job AND window_mode = 'schedule' AND schedule = @schedule
         AND (created_at > @from OR schedule_since > @from)`,
    )
    .run({ job, schedule, from: fromMs });
}

function registerSettings(s: Sqlite, i: AcquireInput, now: number): JobChange | undefined {
  const spec = i.spec ?? {};
  const next: JobSettings = {
    schedule: spec.schedule ?? null,
    tz: spec.tz ?? null,
    window_mode: spec.window_mode ?? null,
    window_format: spec.window_format ?? null,
    window_offset: spec.window_offset ?? null,
    ttl_ms: i.ttlMs,
    max_delay_ms: spec.max_delay_ms ?? null,
    alert_after_ms: spec.alert_after_ms ?? null,
    alert_lookback_ms: spec.alert_lookback_ms ?? null,
    expect_min_ms: spec.expect_min_ms ?? null,
    expect_max_ms: spec.expect_max_ms ?? null,
  };
  const old = s.db.prepare('SELECT * FROM jobs WHERE name = ?').get(i.job) as JobRecord | undefined;
  if (!old) {
    s.db
      .prepare(
        `INSERT INTO jobs (name, schedule, tz, window_mode, window_format, window_offset, ttl_ms, max_delay_ms,
          alert_after_ms, alert_lookback_ms,
         expect_min_ms, expect_max_ms, created_at, updated_at, version)
       VALUES (@name, @schedule, @tz, @window_mode, @window_format, @window_offset, @ttl_ms, @max_delay_ms, @alert_after_ms,
         @alert_lookback_ms,
         @expect_min_ms, @expect_max_ms, @now, @now, 1)`,
      )
      .run({ name: i.job, ...next, now });
    return undefined;
  }
  const before: JobSettings = Object.fromEntries(SETTINGS.map((k) => [k, old[k]]));
  if (SETTINGS.every((k) => before[k] === next[k])) return undefined;
  // A run with no schedule settings says nothing about the schedule: never erases it.
  if (old.schedule !== null && next.schedule === null && next.window_mode !== 'schedule') return undefined;
  const { version } = s.db
    .prepare(
      `UPDATE jobs SET schedule = @schedule, tz = @tz, window_mode = @window_mode, window_format = @window_format,
        window_offset = @window_offset,
       ttl_ms = @ttl_ms, max_delay_ms = @max_delay_ms, alert_after_ms = @alert_after_ms, alert_lookback_ms = @alert_lookback_ms,
       expect_min_ms = @expect_min_ms, expect_max_ms = @expect_max_ms, updated_at = @now, version = version + 1,
       schedule_since = CASE WHEN @moved THEN @now ELSE schedule_since END
     WHERE name = @name RETURNING version`,
    )
    .get({ name: i.job, ...next, now, moved: old.window_mode !== null && scheduleMoved(before, next) ? 1 : 0 }) as {
    version: number;
  };
  if (old.window_mode === null || (old.schedule === null && next.schedule === null)) return undefined;
  recordEventSync(
    s,
    {
      job: i.job,
      kind: 'job-changed',
      owner: i.owner,
      hostTime: i.hostTime,
      detail: { old: before, new: next, version, adopted: true },
    },
    now,
  );
  return { old: before, new: next, version };
}
