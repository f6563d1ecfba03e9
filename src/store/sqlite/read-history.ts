// The reads of the ledger: events, windows, occurrence reasons and event counts.
import {
  type EventCount,
  type HistoryEvent,
  type OccurrenceCount,
  type RangeOccurrence,
  SKIP_KINDS_SQL,
  type WindowRow,
  type WindowStates,
  skipReasonSql,
} from '../contract.js';
import type { Sqlite } from './context.js';

export async function readHistory(s: Sqlite, job: string, limit: number, window?: string): Promise<HistoryEvent[]> {
  const rows = s.db
    .prepare(
      'SELECT * FROM (SELECT * FROM events WHERE job = ? AND (? IS NULL OR window_key = ?) ORDER BY seq DESC LIMIT ?) ORDER BY seq',
    )
    .all(job, window ?? null, window ?? null, limit) as Array<Record<string, unknown>>;
  return rows.map((r) => ({
    seq: String(r.seq),
    kind: r.kind as string,
    window: (r.window_key as string | null) ?? null,
    owner: (r.owner as string | null) ?? null,
    host: (r.host as string | null) ?? null,
    generation: r.generation == null ? null : String(r.generation),
    dbTime: new Date(r.db_time as number),
    hostTime: r.host_time == null ? null : new Date(r.host_time as number),
    detail: JSON.parse(r.detail as string) as Record<string, unknown>,
  }));
}

export async function readJobWindows(s: Sqlite, job: string, limit: number): Promise<WindowRow[]> {
  const rows = s.db
    .prepare(
      `SELECT * FROM (SELECT * FROM windows WHERE job = ? AND completed_at IS NULL ORDER BY started_at DESC LIMIT ?)
     UNION ALL
     SELECT * FROM (SELECT * FROM windows WHERE job = ? AND completed_at IS NOT NULL ORDER BY completed_at DESC, generation
       DESC LIMIT ?)`,
    )
    .all(job, limit, job, limit) as Array<Record<string, unknown>>;
  const at = (v: unknown): Date | null => (v == null ? null : new Date(v as number));
  return rows.map((r) => ({
    window: r.window_key as string,
    scheduledAt: at(r.scheduled_at),
    outcome: r.outcome as string,
    attempts: r.attempts as number,
    generation: String(r.generation),
    owner: r.owner as string,
    firstStartedAt: at(r.first_started_at)!,
    startedAt: at(r.started_at)!,
    finishedAt: at(r.finished_at),
    completedAt: at(r.completed_at),
    exitCode: (r.exit_code as number | null) ?? null,
    // Negative: run's default budget, reported as none.
    maxAttempts: ((r.max_attempts as number | null) ?? 0) > 0 ? (r.max_attempts as number) : null,
  }));
}

/** A window's reason (the window aliased `w`), as PostgreSQL's and monitor/occurrences.ts judge one occurrence. */
const e = 'events e WHERE e.job = w.job AND e.window_key = w.window_key';
const REASON_SQL = `CASE
           WHEN w.outcome = 'running' THEN 'running'
           WHEN w.outcome IN ('failed', 'lost', 'replaced') THEN
             CASE WHEN w.max_attempts > 0 AND w.max_attempts <= w.attempts THEN 'exhausted'
                  WHEN w.outcome = 'replaced' THEN 'skipped-replaced' ELSE 'failed' END
           WHEN w.outcome = 'missed' THEN coalesce((SELECT CASE WHEN json_extract(e.detail, '$.reason') = 'catch-up-limit'
               THEN 'missed-catch-up-limit' WHEN json_type(e.detail, '$.max_delay_ms') IS NOT NULL THEN 'missed-max-delay' END
             FROM ${e} AND e.kind = 'window-missed' ORDER BY e.seq DESC LIMIT 1), 'missed-other')
           WHEN w.generation = 0 AND EXISTS (SELECT 1 FROM ${e} AND e.kind = 'window-marked') THEN 'skipped-marked'
           WHEN w.outcome = 'skipped' THEN 'skipped-paused'
           WHEN w.claimed_as = 'backfill' THEN 'backfilled'
           WHEN w.claimed_as = 'catch-up' THEN 'caught-up'
           ELSE 'completed' END`;

export async function readOccurrenceCounts(s: Sqlite, job?: string): Promise<OccurrenceCount[]> {
  const since = '@now - coalesce(j.alert_lookback_ms, 86400000)';
  // As PostgreSQL's (monitor/occurrences.ts judges one occurrence the same way); the skips
  // within the longest lookback through the partial index events_skips (sql/sqlite/indexes.sql),
  // the latest per window.
  return s.db
    .prepare(
      `SELECT job, reason, count(*) AS n FROM (
         SELECT w.job, ${REASON_SQL} AS reason
         FROM windows w JOIN jobs j ON j.name = w.job
         WHERE coalesce(w.scheduled_at, w.first_started_at) >= ${since} AND (@job IS NULL OR w.job = @job)
         UNION ALL
         SELECT job, ${skipReasonSql('kind')} FROM (
           SELECT e.job, e.kind, row_number() OVER (PARTITION BY e.job, e.window_key ORDER BY e.seq DESC) AS latest
           FROM events e JOIN jobs j ON j.name = e.job
           WHERE e.kind IN (${SKIP_KINDS_SQL}) AND e.window_key IS NOT NULL AND (@job IS NULL OR e.job = @job)
             AND e.db_time >= @now - (SELECT max(coalesce(alert_lookback_ms, 86400000)) FROM jobs) AND e.db_time >= ${since}
             AND NOT EXISTS (SELECT 1 FROM windows w WHERE w.job = e.job AND w.window_key = e.window_key))
         WHERE latest = 1)
       GROUP BY 1, 2`,
    )
    .all({ now: Date.now(), job: job ?? null }) as OccurrenceCount[];
}

/** See LeaseStore.readOccurrencesBetween: as PostgreSQL's, a skip read from an hour before the range. */
export async function readOccurrencesBetween(
  s: Sqlite,
  jobs: readonly string[],
  from: Date,
  to: Date,
  perJob: number,
): Promise<RangeOccurrence[]> {
  if (jobs.length === 0) return [];
  const rows = s.db
    .prepare(
      `SELECT * FROM (
         SELECT w.job, w.window_key, coalesce(w.scheduled_at, w.first_started_at) AS at, w.attempts,
                CASE WHEN w.max_attempts > 0 THEN w.max_attempts END AS max_attempts, w.generation, ${REASON_SQL} AS reason,
                NULL AS scheduled_text,
                row_number() OVER (PARTITION BY w.job ORDER BY coalesce(w.scheduled_at, w.first_started_at) DESC) AS n
           FROM windows w
          WHERE w.job IN (SELECT value FROM json_each(@jobs))
            AND coalesce(w.scheduled_at, w.first_started_at) >= @from AND coalesce(w.scheduled_at, w.first_started_at) < @to)
        WHERE n <= @per
       UNION ALL
       SELECT job, window_key, db_time, 0, NULL, NULL, ${skipReasonSql('kind')}, json_extract(detail, '$.scheduled_at'), 1 FROM (
         SELECT e.*, row_number() OVER (PARTITION BY e.job, e.window_key ORDER BY e.seq DESC) AS latest
           FROM events e
          WHERE e.kind IN (${SKIP_KINDS_SQL}) AND e.db_time >= @from - 3600000 AND e.db_time < @to
            AND e.job IN (SELECT value FROM json_each(@jobs)) AND e.window_key IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM windows w WHERE w.job = e.job AND w.window_key = e.window_key))
        WHERE latest = 1`,
    )
    .all({ jobs: JSON.stringify(jobs), from: from.getTime(), to: to.getTime(), per: perJob }) as Array<
    Record<string, unknown>
  >;
  return rows.flatMap((r) => {
    const scheduled = typeof r.scheduled_text === 'string' ? Date.parse(r.scheduled_text) : NaN;
    const at = new Date(Number.isNaN(scheduled) ? (r.at as number) : scheduled);
    if (at < from || at >= to) return [];
    return [
      {
        job: r.job as string,
        window: r.window_key as string,
        at,
        reason: r.reason as string,
        attempts: r.attempts as number,
        maxAttempts: (r.max_attempts as number | null) ?? null,
        generation: r.generation == null ? null : String(r.generation),
      },
    ];
  });
}

export async function readEventCounts(s: Sqlite, kinds: readonly string[]): Promise<EventCount[]> {
  return s.db
    .prepare('SELECT job, kind, host, n FROM event_counts WHERE kind IN (SELECT value FROM json_each(?))')
    .all(JSON.stringify(kinds)) as EventCount[];
}

/** See LeaseStore.readWindows. */
export async function readWindows(s: Sqlite, job: string, keys: readonly string[]): Promise<WindowStates> {
  const now = Date.now();
  // From when the current schedule is expected: its registration or its change since (as PostgreSQL's).
  const registered = s.db
    .prepare('SELECT max(created_at, coalesce(schedule_since, 0)) AS created_at FROM jobs WHERE name = ?')
    .get(job) as { created_at: number } | undefined;
  const horizon = s.db.prepare('SELECT retained_from FROM retention WHERE job = ?').pluck().get(job) as
    number | null | undefined;
  const rows = s.db
    .prepare(
      'SELECT window_key, outcome, attempts, completed_at FROM windows WHERE job = ? AND window_key IN (SELECT value FROM json_each(?))',
    )
    .all(job, JSON.stringify(keys)) as Array<{
    window_key: string;
    outcome: string;
    attempts: number;
    completed_at: number | null;
  }>;
  return {
    dbNow: new Date(now),
    registeredAt: registered ? new Date(registered.created_at) : undefined,
    retainedFrom: horizon == null ? null : new Date(horizon),
    windows: new Map(
      rows.map((r) => [
        r.window_key,
        {
          outcome: r.outcome,
          attempts: r.attempts,
          completedAt: r.completed_at === null ? null : new Date(r.completed_at),
        },
      ]),
    ),
  };
}
