// Monitoring by absence: the state of every registered job read with a few set-based queries,
// and the judgement of which windows are overdue, which owners are stuck, which keep failing.
import type { DateTime } from 'luxon';
import type pg from 'pg';
import { parseIsoOffset } from './duration.js';
import { quoteIdent } from './names.js';
import { windowKey } from './occurrence.js';
import { parseSchedule, previousTick, typicalInterval, type Schedule } from './schedule.js';

export interface JobState {
  name: string;
  schedule: string | null;
  tz: string | null;
  windowMode: string | null;
  createdAt: Date;
  alertAfterMs: number | null;
  holder: string | null;
  generation: string | null;
  held: boolean;
  expiresInMs: number | null;
  heldForMs: number | null;
  lastWindow: string | null;
  lastCompletedAt: Date | null;
  lastDurationMs: number | null;
  openWindows: Array<{ window: string; attempts: number; outcome: string }>;
  /** The window that should be completed by now (schedule-derived jobs only). */
  due?: { window: string; scheduledAt: Date; overdueSince: Date; completed: boolean } | undefined;
  overdue: boolean;
  intervalMs: number | null;
}

/** Without --alert-after: half the interval, at most an hour (a daily job is late at 01:05 when due 00:05). */
export function defaultAlertAfterMs(intervalMs: number): number {
  return Math.min(intervalMs / 2, 3_600_000);
}

/** Jobs' state on the database clock. `name` narrows to one job. */
export async function readJobStates(pool: pg.Pool, schema: string, name?: string): Promise<{ dbNow: Date; jobs: JobState[] }> {
  const s = quoteIdent(schema);
  const { rows } = await pool.query(
    `SELECT j.name, j.schedule, j.tz, j.window_mode, j.window_format, j.window_offset, j.alert_after_ms, j.created_at,
            l.owner, l.generation, l.expires_at > now() AS held,
            (extract(epoch FROM l.expires_at - now()) * 1000)::bigint AS expires_in_ms,
            (extract(epoch FROM now() - l.acquired_at) * 1000)::bigint AS held_for_ms,
            lc.window_key AS last_window, lc.completed_at AS last_completed_at, lc.duration_ms,
            coalesce(ow.open, '[]'::jsonb) AS open_windows, now() AS db_now
       FROM ${s}.jobs j
       LEFT JOIN ${s}.leases l ON l.name = j.name
       LEFT JOIN LATERAL (
         SELECT w.window_key, w.completed_at, (extract(epoch FROM w.completed_at - w.started_at) * 1000)::bigint AS duration_ms
           FROM ${s}.windows w WHERE w.job = j.name AND w.completed_at IS NOT NULL
          ORDER BY w.completed_at DESC LIMIT 1) lc ON true
       LEFT JOIN LATERAL (
         SELECT jsonb_agg(jsonb_build_object('window', o.window_key, 'attempts', o.attempts, 'outcome', o.outcome) ORDER BY o.started_at) AS open
           FROM (SELECT w.window_key, w.attempts, w.outcome, w.started_at FROM ${s}.windows w
                  WHERE w.job = j.name AND w.completed_at IS NULL ORDER BY w.started_at DESC LIMIT 10) o) ow ON true
      WHERE $1::text IS NULL OR j.name = $1
      ORDER BY j.name`,
    [name ?? null],
  );
  const dbNow: Date = rows[0]?.db_now ?? (await pool.query('SELECT now() AS now')).rows[0].now;
  // Thousands of jobs share a handful of schedules: work out each distinct due window once.
  const dueCache = new Map<string, DueWindow>();
  const jobs: JobState[] = rows.map((r) => ({
    name: r.name,
    schedule: r.schedule,
    tz: r.tz,
    windowMode: r.window_mode,
    createdAt: r.created_at,
    alertAfterMs: r.alert_after_ms === null ? null : Number(r.alert_after_ms),
    holder: r.held ? r.owner : null,
    generation: r.generation,
    held: r.held === true,
    expiresInMs: r.held ? Number(r.expires_in_ms) : null,
    heldForMs: r.held ? Number(r.held_for_ms) : null,
    lastWindow: r.last_window,
    lastCompletedAt: r.last_completed_at,
    lastDurationMs: r.duration_ms === null ? null : Number(r.duration_ms),
    openWindows: r.open_windows,
    overdue: false,
    intervalMs: null,
    ...dueWindowCached(r, dbNow, dueCache),
  }));
  await markCompletion(pool, s, jobs);
  return { dbNow, jobs };
}

// Schedules repeat across thousands of jobs: parse and step each (expression, zone) once.
const scheduleCache = new Map<string, Schedule | null>();
function cachedSchedule(expr: string, tz: string): Schedule | null {
  const key = `${expr}\u0000${tz}`;
  let s = scheduleCache.get(key);
  if (s === undefined) {
    try {
      s = parseSchedule(expr, tz);
    } catch {
      s = null;
    }
    scheduleCache.set(key, s);
  }
  return s;
}

interface DueWindow {
  intervalMs?: number;
  due?: { window: string; scheduledAt: Date; overdueSince: Date };
}

function dueWindowCached(r: Record<string, unknown>, dbNow: Date, cache: Map<string, DueWindow>): Partial<JobState> {
  if (r.window_mode !== 'schedule' || typeof r.schedule !== 'string') return {};
  const key = [r.schedule, r.tz, r.window_format, r.window_offset, r.alert_after_ms].join('\u0000');
  let d = cache.get(key);
  if (d === undefined) {
    d = dueWindowOf(r, dbNow);
    cache.set(key, d);
  }
  // A job registered after the due tick was not yet expected to have run it.
  if (!d.due || d.due.scheduledAt.getTime() < (r.created_at as Date).getTime()) return { intervalMs: d.intervalMs ?? null };
  return { intervalMs: d.intervalMs ?? null, due: { ...d.due, completed: false } };
}

function dueWindowOf(r: Record<string, unknown>, dbNow: Date): DueWindow {
  const schedule = cachedSchedule(r.schedule as string, (r.tz as string | null) ?? 'UTC');
  if (!schedule) return {};
  const intervalMs = typicalInterval(schedule, dbNow);
  const graceMs = r.alert_after_ms !== null && r.alert_after_ms !== undefined ? Number(r.alert_after_ms) : defaultAlertAfterMs(intervalMs);
  const tick: DateTime = previousTick(schedule, new Date(dbNow.getTime() - graceMs));
  try {
    const window = windowKey(tick, {
      format: (r.window_format as string | null) ?? undefined,
      offset: r.window_offset ? parseIsoOffset(r.window_offset as string, '--window-offset') : undefined,
    });
    return { intervalMs, due: { window, scheduledAt: tick.toJSDate(), overdueSince: new Date(tick.toMillis() + graceMs) } };
  } catch {
    return { intervalMs };
  }
}

async function markCompletion(pool: pg.Pool, s: string, jobs: JobState[]): Promise<void> {
  const withDue = jobs.filter((j) => j.due);
  if (withDue.length === 0) return;
  const { rows } = await pool.query<{ job: string; window_key: string }>(
    `SELECT w.job, w.window_key FROM ${s}.windows w
       JOIN unnest($1::text[], $2::text[]) AS d(job, window_key) ON w.job = d.job AND w.window_key = d.window_key
      WHERE w.completed_at IS NOT NULL`,
    [withDue.map((j) => j.name), withDue.map((j) => j.due!.window)],
  );
  const done = new Set(rows.map((r) => `${r.job}\u0000${r.window_key}`));
  for (const j of withDue) {
    j.due!.completed = done.has(`${j.name}\u0000${j.due!.window}`);
    j.overdue = !j.due!.completed;
  }
}

export interface Problem {
  job: string;
  severity: 'critical' | 'warning';
  kind: 'overdue' | 'stuck-owner' | 'failing';
  message: string;
  since?: Date | undefined;
}

export interface CheckLimits {
  /** An owner holding one generation longer than this is stuck. */
  maxHoldMs?: number | undefined;
  /** An open window at this many attempts or more keeps failing. */
  maxAttempts: number;
}

export function findProblems(jobs: JobState[], dbNow: Date, limits: CheckLimits): Problem[] {
  const problems: Problem[] = [];
  for (const j of jobs) {
    if (j.overdue && j.due) {
      problems.push({
        job: j.name, severity: 'critical', kind: 'overdue', since: j.due.overdueSince,
        message: `window ${j.due.window} (scheduled ${j.due.scheduledAt.toISOString()}) not completed; overdue since ${j.due.overdueSince.toISOString()}`,
      });
    }
    if (limits.maxHoldMs !== undefined && j.held && j.heldForMs !== null && j.heldForMs > limits.maxHoldMs) {
      const since = new Date(dbNow.getTime() - j.heldForMs);
      problems.push({
        job: j.name, severity: 'critical', kind: 'stuck-owner', since,
        message: `owner ${j.holder} has held generation ${j.generation} since ${since.toISOString()}, longer than --max-hold`,
      });
    }
    for (const w of j.openWindows) {
      if (w.attempts >= limits.maxAttempts && w.outcome !== 'running' && w.outcome !== 'missed') {
        problems.push({ job: j.name, severity: 'warning', kind: 'failing', message: `window ${w.window} failed ${w.attempts} attempts (last outcome ${w.outcome})` });
      }
    }
  }
  return problems;
}

export interface HistoryEvent {
  seq: string;
  kind: string;
  window: string | null;
  owner: string | null;
  host: string | null;
  generation: string | null;
  dbTime: Date;
  hostTime: Date | null;
  detail: Record<string, unknown>;
}

/** The job's latest `limit` events, oldest first. */
export async function readHistory(pool: pg.Pool, schema: string, job: string, limit: number): Promise<HistoryEvent[]> {
  const s = quoteIdent(schema);
  const { rows } = await pool.query(
    `SELECT * FROM (
       SELECT seq, kind, window_key, owner, host, generation, db_time, host_time, detail
         FROM ${s}.events WHERE job = $1 ORDER BY seq DESC LIMIT $2) e
     ORDER BY seq`,
    [job, limit],
  );
  return rows.map((r) => ({
    seq: r.seq, kind: r.kind, window: r.window_key, owner: r.owner, host: r.host, generation: r.generation,
    dbTime: r.db_time, hostTime: r.host_time, detail: r.detail,
  }));
}
