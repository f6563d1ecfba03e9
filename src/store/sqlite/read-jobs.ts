// The monitor's reads of the registry: every job with its lease and open windows, the schedules to evaluate.
import { JOB_CHANGES_WINDOW_MS, type JobRow, type ScheduleKey } from '../contract.js';
import { budgetOutcome } from './attempt-budget.js';
import { type JobRecord, type Sqlite, hostMonotonicMs, hostOf, isPaused, pidAlive } from './context.js';

/** The newest open windows (oldest first), with the one of most failed attempts first when it is older. */
function withWorst(newest: JobRow['openWindows'], worst: string | null): JobRow['openWindows'] {
  if (worst === null) return newest;
  const w = JSON.parse(worst) as JobRow['openWindows'][number];
  return newest.some((n) => n.window === w.window) ? newest : [w, ...newest];
}

/**
 * Every job with its lease, last completed window and newest open windows (`?` twice: a job
 * name, or NULL for all). Exported for the test that checks its plan uses the indexes.
 */
export const JOB_ROWS_SQL = `
  SELECT j.*, l.owner, l.generation, l.expires_mono, l.boot_id, l.acquired_at, l.holder_pid,
         (SELECT json_object('window', w.window_key, 'completed_at', w.completed_at, 'started_at', w.started_at, 'generation', w.generation)
            FROM windows w WHERE w.job = j.name AND w.completed_at IS NOT NULL
             -- A window marked ahead of its tick is final, never the latest completion (as PostgreSQL's 023).
             AND (w.scheduled_at IS NULL OR w.scheduled_at <= w.completed_at)
           ORDER BY w.completed_at DESC, w.generation DESC LIMIT 1) AS last,
         (SELECT json_group_array(json_object('window', o.window_key, 'attempts', o.attempts, 'outcome', ${budgetOutcome('o')},
           'generation', o.generation, 'maxAttempts', nullif(max(o.max_attempts, 0), 0)))
            FROM (SELECT window_key, attempts, outcome, generation, max_attempts FROM windows w
                   WHERE w.job = j.name AND w.completed_at IS NULL
                   ORDER BY started_at DESC LIMIT 10) o) AS open,
         (SELECT json_object('window', w.window_key, 'attempts', w.attempts, 'outcome', ${budgetOutcome('w')},
           'generation', w.generation, 'maxAttempts', nullif(max(w.max_attempts, 0), 0))
            FROM windows w WHERE w.job = j.name AND w.completed_at IS NULL
           ORDER BY w.outcome NOT IN ('running', 'missed') DESC, w.attempts DESC, w.started_at DESC LIMIT 1) AS worst,
         (SELECT count(*) FROM windows w WHERE w.job = j.name AND w.completed_at IS NULL) AS open_count,
         (SELECT count(*) FROM events e WHERE e.job = j.name AND e.kind = 'job-changed' AND e.db_time > @since) AS recent_job_changes
    FROM jobs j LEFT JOIN leases l ON l.name = j.name
   WHERE @name IS NULL OR j.name = @name
   ORDER BY j.name`;

export async function readJobRows(s: Sqlite, name?: string): Promise<{ dbNow: Date; rows: JobRow[] }> {
  const now = Date.now();
  const nowMono = hostMonotonicMs();
  const jobs = s.db.prepare(JOB_ROWS_SQL).all({ name: name ?? null, since: now - JOB_CHANGES_WINDOW_MS }) as Array<
    Record<string, unknown>
  >;
  return {
    dbNow: new Date(now),
    rows: jobs.map((r) => {
      const held = r.owner != null && r.boot_id === s.boot && (r.expires_mono as number) > nowMono;
      const last = r.last
        ? (JSON.parse(r.last as string) as {
            window: string;
            completed_at: number;
            started_at: number;
            generation: number;
          })
        : undefined;
      return {
        name: r.name as string,
        schedule: (r.schedule as string | null) ?? null,
        tz: (r.tz as string | null) ?? null,
        windowMode: (r.window_mode as string | null) ?? null,
        windowFormat: (r.window_format as string | null) ?? null,
        windowOffset: (r.window_offset as string | null) ?? null,
        alertAfterMs: (r.alert_after_ms as number | null) ?? null,
        alertLookbackMs: (r.alert_lookback_ms as number | null) ?? null,
        expectMinMs: (r.expect_min_ms as number | null) ?? null,
        expectMaxMs: (r.expect_max_ms as number | null) ?? null,
        createdAt: new Date(r.created_at as number),
        scheduleSince: r.schedule_since == null ? null : new Date(r.schedule_since as number),
        owner: (r.owner as string | null) ?? null,
        generation: r.generation == null ? null : String(r.generation),
        held,
        // As acquire judges a crashed holder: its process, on this host and this boot, is gone.
        holderGone:
          held && r.holder_pid != null && hostOf(r.owner as string) === s.host && !pidAlive(r.holder_pid as number),
        expiresInMs: held ? (r.expires_mono as number) - nowMono : null,
        heldForMs: held ? now - (r.acquired_at as number) : null,
        lastWindow: last?.window ?? null,
        lastCompletedAt: last ? new Date(last.completed_at) : null,
        // A window marked or skipped by hand (generation 0) ran nothing: no duration.
        lastDurationMs: last && last.generation > 0 ? last.completed_at - last.started_at : null,
        // Oldest first, as PostgreSQL's jsonb_agg(... ORDER BY started_at).
        openWindows: withWorst(
          (JSON.parse((r.open as string | null) ?? '[]') as JobRow['openWindows']).reverse(),
          r.worst as string | null,
        ),
        openCount: Number(r.open_count ?? 0),
        version: Number(r.version ?? 0),
        paused: isPaused(r as unknown as JobRecord, now),
        pause:
          r.paused_at == null
            ? null
            : {
                since: new Date(r.paused_at as number),
                until: r.paused_until == null ? null : new Date(r.paused_until as number),
                reason: (r.pause_reason as string | null) ?? null,
                by: (r.paused_by as string | null) ?? null,
              },
        recentJobChanges: Number(r.recent_job_changes ?? 0),
      };
    }),
  };
}

export async function readScheduleKeys(s: Sqlite, name?: string): Promise<{ dbNow: Date; keys: ScheduleKey[] }> {
  const rows = s.db
    .prepare(
      `SELECT DISTINCT schedule, tz, window_format, window_offset, alert_after_ms, alert_lookback_ms FROM jobs
      WHERE window_mode = 'schedule' AND schedule IS NOT NULL AND (? IS NULL OR name = ?)`,
    )
    .all(name ?? null, name ?? null) as Array<Record<string, string | number | null>>;
  return {
    dbNow: new Date(Date.now()),
    keys: rows.map((r) => ({
      schedule: r.schedule as string,
      tz: (r.tz as string | null) ?? null,
      windowFormat: (r.window_format as string | null) ?? null,
      windowOffset: (r.window_offset as string | null) ?? null,
      alertAfterMs: (r.alert_after_ms as number | null) ?? null,
      alertLookbackMs: (r.alert_lookback_ms as number | null) ?? null,
    })),
  };
}
