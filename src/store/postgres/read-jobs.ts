// The monitor's reads of the registry: every job with its lease and open windows, the schedules to evaluate.
import { JOB_CHANGES_WINDOW_MS, type JobRow, type ScheduleKey } from '../contract.js';
import { budgetOutcome, reportedBudget } from './attempt-budget.js';
import { HOLDER_GONE_SQL, type Pg, epochMs } from './context.js';

export async function readJobRows(db: Pg, name?: string): Promise<{ dbNow: Date; rows: JobRow[] }> {
  const s = db.s;
  // Instants and spans as float8 milliseconds (date_part, not numeric extract): parsing
  // three timestamps per job was a real share of a large read. The latest completion comes
  // from the job's digest (migration 019), and from the ledger only for a job without one: a
  // probe of windows_last_completed per job cost more as the history grew. Open windows are few, so they
  // are gathered in one pass rather than looked up job by job (measured by `npm run bench`):
  // the newest 10, and the one with the most failed attempts when it is older (for `check`).
  const { rows } = await db.query(
    `SELECT j.name, j.schedule, j.tz, j.window_mode, j.window_format, j.window_offset, j.alert_after_ms,
            j.alert_lookback_ms, j.expect_min_ms, j.expect_max_ms, ${epochMs('j.created_at')} AS created_ms,
            ${epochMs('j.schedule_since')} AS schedule_since_ms,
            l.owner, l.generation, l.expires_at > now() AS held, ${HOLDER_GONE_SQL('l')} AS holder_gone,
            round(date_part('epoch', l.expires_at - now()) * 1000) AS expires_in_ms,
            round(date_part('epoch', now() - l.acquired_at) * 1000) AS held_for_ms,
            coalesce(dg.last_window, lc.window_key) AS last_window,
            ${epochMs('coalesce(dg.last_completed_at, lc.completed_at)')} AS last_completed_ms,
            CASE WHEN coalesce(dg.last_generation, lc.generation) > 0 -- a window marked or skipped by hand ran nothing
                 THEN round(date_part('epoch', coalesce(dg.last_completed_at, lc.completed_at) - coalesce(dg.last_started_at,
                   lc.started_at)) * 1000)
            END AS duration_ms,
            ow.open AS open_windows, coalesce(ow.n, 0)::int AS open_count, ${epochMs('now()')} AS db_now_ms,
            j.version, ${epochMs('j.paused_at')} AS paused_at_ms, ${epochMs('j.paused_until')} AS paused_until_ms,
            j.pause_reason, j.paused_by,
            (j.paused_at IS NOT NULL AND (j.paused_until IS NULL OR j.paused_until > now())) AS paused,
            coalesce(jc.n, 0) AS recent_job_changes
       FROM ${s}.jobs j
       LEFT JOIN ${s}.leases l ON l.name = j.name
       LEFT JOIN ${s}.window_digest dg ON dg.job = j.name
       LEFT JOIN LATERAL (
         SELECT w.window_key, w.completed_at, w.started_at, w.generation
           FROM ${s}.windows w WHERE dg.job IS NULL AND w.job = j.name AND w.completed_at IS NOT NULL
            AND (w.scheduled_at IS NULL OR w.scheduled_at <= w.completed_at) -- not a window marked ahead of its tick
          ORDER BY w.completed_at DESC, w.generation DESC LIMIT 1) lc ON true
       LEFT JOIN (
         SELECT e.job, count(*)::int AS n FROM ${s}.events e
          WHERE e.kind = 'job-changed' AND e.db_time > now() - make_interval(secs => $2::float8 / 1000)
            AND ($1::text IS NULL OR e.job = $1)
          GROUP BY e.job) jc ON jc.job = j.name
       LEFT JOIN (
         SELECT o.job, jsonb_agg(jsonb_build_object('window', o.window_key, 'attempts', o.attempts,
           'outcome', ${budgetOutcome('o')}, 'generation', o.generation, 'maxAttempts', ${reportedBudget('o')})
           ORDER BY o.started_at) AS open,
                max(o.n) AS n
           FROM (SELECT w.job, w.window_key, w.attempts, w.outcome, w.generation, w.started_at, w.max_attempts,
                        row_number() OVER (PARTITION BY w.job ORDER BY w.started_at DESC) AS rn,
                        row_number() OVER (PARTITION BY w.job ORDER BY w.outcome NOT IN ('running', 'missed') DESC,
                          w.attempts DESC, w.started_at DESC) AS worst,
                        count(*) OVER (PARTITION BY w.job) AS n
                   FROM ${s}.windows w WHERE w.completed_at IS NULL AND ($1::text IS NULL OR w.job = $1)) o
          WHERE o.rn <= 10 OR o.worst = 1 GROUP BY o.job) ow ON ow.job = j.name
      WHERE $1::text IS NULL OR j.name = $1
      ORDER BY j.name`,
    [name ?? null, JOB_CHANGES_WINDOW_MS],
  );
  const dbNow = new Date(rows[0]?.db_now_ms ?? (await db.query(`SELECT ${epochMs('now()')} AS ms`, [])).rows[0].ms);
  return {
    dbNow,
    rows: rows.map((r) => ({
      name: r.name,
      schedule: r.schedule,
      tz: r.tz,
      windowMode: r.window_mode,
      windowFormat: r.window_format,
      windowOffset: r.window_offset,
      alertAfterMs: r.alert_after_ms === null ? null : Number(r.alert_after_ms),
      alertLookbackMs: r.alert_lookback_ms === null ? null : Number(r.alert_lookback_ms),
      expectMinMs: r.expect_min_ms === null ? null : Number(r.expect_min_ms),
      expectMaxMs: r.expect_max_ms === null ? null : Number(r.expect_max_ms),
      createdAt: new Date(r.created_ms),
      scheduleSince: r.schedule_since_ms === null ? null : new Date(r.schedule_since_ms),
      owner: r.owner,
      generation: r.generation,
      held: r.held === true,
      holderGone: r.held === true && r.holder_gone === true,
      expiresInMs: r.held ? r.expires_in_ms : null,
      heldForMs: r.held ? r.held_for_ms : null,
      lastWindow: r.last_window,
      lastCompletedAt: r.last_completed_ms === null ? null : new Date(r.last_completed_ms),
      lastDurationMs: r.duration_ms,
      openWindows: r.open_windows ?? [],
      openCount: r.open_count,
      version: Number(r.version),
      paused: r.paused === true,
      pause:
        r.paused_at_ms === null
          ? null
          : {
              since: new Date(r.paused_at_ms),
              until: r.paused_until_ms === null ? null : new Date(r.paused_until_ms),
              reason: r.pause_reason,
              by: r.paused_by,
            },
      recentJobChanges: r.recent_job_changes,
    })),
  };
}

export async function readScheduleKeys(db: Pg, name?: string): Promise<{ dbNow: Date; keys: ScheduleKey[] }> {
  // The clock comes along even when no job has a schedule (the LEFT JOIN keeps one row).
  const { rows } = await db.query(
    `SELECT ${epochMs('now()')} AS db_now_ms, k.*
       FROM (SELECT 1) one LEFT JOIN (
         SELECT DISTINCT schedule, tz, window_format, window_offset, alert_after_ms, j.alert_lookback_ms FROM ${db.s}.jobs j
          WHERE window_mode = 'schedule' AND schedule IS NOT NULL AND ($1::text IS NULL OR name = $1)) k ON true`,
    [name ?? null],
  );
  return {
    dbNow: new Date(rows[0].db_now_ms),
    keys: rows
      .filter((r) => r.schedule !== null)
      .map((r) => ({
        schedule: r.schedule,
        tz: r.tz,
        windowFormat: r.window_format,
        windowOffset: r.window_offset,
        alertAfterMs: r.alert_after_ms === null ? null : Number(r.alert_after_ms),
        alertLookbackMs: r.alert_lookback_ms === null ? null : Number(r.alert_lookback_ms),
      })),
  };
}
