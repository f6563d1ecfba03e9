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
import { reportedBudget } from './attempt-budget.js';
import { type Pg, epochMs } from './context.js';

export async function readHistory(db: Pg, job: string, limit: number, window?: string): Promise<HistoryEvent[]> {
  const { rows } = await db.query(
    `SELECT * FROM (
       SELECT seq, kind, window_key, owner, host, generation, db_time, host_time, detail
         FROM ${db.s}.events WHERE job = $1 AND ($3::text IS NULL OR window_key = $3) ORDER BY seq DESC LIMIT $2) e
     ORDER BY seq`,
    [job, limit, window ?? null],
  );
  return rows.map((r) => ({
    seq: r.seq,
    kind: r.kind,
    window: r.window_key,
    owner: r.owner,
    host: r.host,
    generation: r.generation,
    dbTime: r.db_time,
    hostTime: r.host_time,
    detail: r.detail,
  }));
}

export async function readJobWindows(db: Pg, job: string, limit: number): Promise<WindowRow[]> {
  const cols =
    'window_key, scheduled_at, outcome, attempts, generation, owner, first_started_at, started_at, finished_at, completed_at, ' +
    // From the row as JSON: a schema before 024 has no such column, and the page still reads.
    `exit_code, ${reportedBudget("(to_jsonb(w) ->> 'max_attempts')::int", '')} AS max_attempts`;
  const { rows } = await db.query(
    `(SELECT ${cols} FROM ${db.s}.windows w WHERE job = $1 AND completed_at IS NULL ORDER BY started_at DESC LIMIT $2)
     UNION ALL
     (SELECT ${cols} FROM ${db.s}.windows w WHERE job = $1 AND completed_at IS NOT NULL ORDER BY completed_at DESC,
       generation DESC LIMIT $2)`,
    [job, limit],
  );
  return rows.map((r) => ({
    window: r.window_key,
    scheduledAt: r.scheduled_at,
    outcome: r.outcome,
    attempts: r.attempts,
    generation: String(r.generation),
    owner: r.owner,
    firstStartedAt: r.first_started_at,
    startedAt: r.started_at,
    finishedAt: r.finished_at,
    completedAt: r.completed_at,
    exitCode: r.exit_code,
    maxAttempts: r.max_attempts,
  }));
}

/** See LeaseStore.readWindows: one primary-key probe per key. */
export async function readWindows(db: Pg, job: string, keys: readonly string[]): Promise<WindowStates> {
  const { rows } = await db.query(
    `SELECT ${epochMs('now()')} AS db_now_ms,
            -- From when the current schedule is expected: its registration or its change since (028).
            (SELECT ${epochMs('greatest(j.created_at, j.schedule_since)')} FROM ${db.s}.jobs j WHERE j.name = $1) AS registered_ms,
            (SELECT ${epochMs('t.retained_from')} FROM ${db.s}.retention t WHERE t.job = $1) AS retained_ms,
            (SELECT coalesce(json_agg(json_build_object('k', w.window_key, 'o', w.outcome, 'a', w.attempts, 'c',
              ${epochMs('w.completed_at')})), '[]'::json)
               FROM ${db.s}.windows w WHERE w.job = $1 AND w.window_key = ANY($2::text[])) AS windows`,
    [job, [...keys]],
  );
  const r = rows[0];
  const windows: WindowStates['windows'] = new Map();
  for (const w of r.windows as Array<{ k: string; o: string; a: number; c: number | null }>) {
    windows.set(w.k, { outcome: w.o, attempts: w.a, completedAt: w.c === null ? null : new Date(w.c) });
  }
  return {
    dbNow: new Date(r.db_now_ms),
    registeredAt: r.registered_ms === null ? undefined : new Date(r.registered_ms),
    retainedFrom: r.retained_ms === null ? null : new Date(r.retained_ms),
    windows,
  };
}

/** windows.claimed_as, or NULL on a schema before 026 (to_jsonb(w) costs most of a 100,000-window read). */
async function claimedAsSql(db: Pg): Promise<string> {
  if (!db.found.claimedAsColumn) {
    const { rows } = await db.query(
      `SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'claimed_as' AND NOT attisdropped`,
      [`${db.s}.windows`],
    );
    db.found.claimedAsColumn = rows.length > 0;
  }
  return db.found.claimedAsColumn ? 'w.claimed_as' : 'NULL::text';
}

/**
 * The reason of the window `w` (aliased so) as monitor/occurrences.ts judges one occurrence;
 * events are read only for the rare windows that need them (missed, handled by hand), through
 * their kind's index. A schema before 024 has no max_attempts: read from the row as JSON
 * (failed windows only).
 */
async function occurrenceReasonSql(db: Pg): Promise<string> {
  const e = `${db.s}.events e WHERE e.job = w.job AND e.window_key = w.window_key`;
  return `CASE
       WHEN w.outcome = 'running' THEN 'running'
       WHEN w.outcome IN ('failed', 'lost', 'replaced') THEN
         CASE WHEN ${reportedBudget("(to_jsonb(w) ->> 'max_attempts')::int", '')} <= w.attempts THEN 'exhausted'
              WHEN w.outcome = 'replaced' THEN 'skipped-replaced' ELSE 'failed' END
       WHEN w.outcome = 'missed' THEN coalesce((SELECT CASE WHEN e.detail ->> 'reason' = 'catch-up-limit'
           THEN 'missed-catch-up-limit' WHEN e.detail ? 'max_delay_ms' THEN 'missed-max-delay' END
         FROM ${e} AND e.kind = 'window-missed' ORDER BY e.seq DESC LIMIT 1), 'missed-other')
       WHEN w.generation = 0 AND EXISTS (SELECT 1 FROM ${e} AND e.kind = 'window-marked') THEN 'skipped-marked'
       WHEN w.outcome = 'skipped' THEN 'skipped-paused'
       ELSE CASE ${await claimedAsSql(db)} WHEN 'backfill' THEN 'backfilled' WHEN 'catch-up' THEN 'caught-up'
         ELSE 'completed' END END`;
}

export async function readOccurrenceCounts(db: Pg, job?: string): Promise<OccurrenceCount[]> {
  const since = "now() - coalesce(j.alert_lookback_ms, 86400000) * interval '1 millisecond'";
  const windows = `SELECT w.job, ${await occurrenceReasonSql(db)} AS reason
     FROM ${db.s}.windows w JOIN ${db.s}.jobs j ON j.name = w.job
     WHERE coalesce(w.scheduled_at, w.first_started_at) >= ${since} AND ($1::text IS NULL OR w.job = $1)`;
  // Occurrences only skipped (no ledger row), by their latest skip: the skip kinds' events
  // within the longest lookback from the index on (kind, db_time), those with a row left out
  // first; then the job's own lookback, which the latest skip is within if any is.
  const skipped = `SELECT s.job, s.reason FROM (
       SELECT DISTINCT ON (e.job, e.window_key) e.job, e.db_time, ${skipReasonSql('e.kind')} AS reason
       FROM ${db.s}.events e
       WHERE e.kind IN (${SKIP_KINDS_SQL}) AND e.window_key IS NOT NULL AND ($1::text IS NULL OR e.job = $1)
         AND e.db_time >= now() - (SELECT max(coalesce(alert_lookback_ms, 86400000)) FROM ${db.s}.jobs)
           * interval '1 millisecond'
         AND NOT EXISTS (SELECT 1 FROM ${db.s}.windows w WHERE w.job = e.job AND w.window_key = e.window_key)
       ORDER BY e.job, e.window_key, e.seq DESC) s
     JOIN ${db.s}.jobs j ON j.name = s.job WHERE s.db_time >= ${since}`;
  const { rows } = await db.query(
    `SELECT job, reason, count(*)::int AS n FROM (${windows} UNION ALL ${skipped}) o GROUP BY 1, 2`,
    [job ?? null],
  );
  return rows.map((r) => ({ job: r.job, reason: r.reason, n: r.n }));
}

export async function readOccurrencesBetween(
  db: Pg,
  jobs: readonly string[],
  from: Date,
  to: Date,
  perJob: number,
): Promise<RangeOccurrence[]> {
  if (jobs.length === 0) return [];
  // Each job's latest windows scheduled in the range through windows_scheduled (job,
  // scheduled_at), those without a scheduled time (--window) by their first claim; then the
  // skip events of the range with no ledger row, through events_kind (kind, db_time). A skip
  // comes after its tick: an hour before the range is read for the ones that were late.
  const { rows } = await db.query(
    `SELECT j.name AS job, w.window_key, ${epochMs('coalesce(w.scheduled_at, w.first_started_at)')} AS at_ms,
            w.attempts, ${reportedBudget("(to_jsonb(w) ->> 'max_attempts')::int", '')} AS max_attempts,
            w.generation::text AS generation, ${await occurrenceReasonSql(db)} AS reason, NULL::text AS scheduled_text
       FROM unnest($1::text[]) j(name)
       CROSS JOIN LATERAL (
         (SELECT * FROM ${db.s}.windows w WHERE w.job = j.name AND w.scheduled_at >= $2 AND w.scheduled_at < $3
           ORDER BY w.scheduled_at DESC LIMIT $4)
         UNION ALL
         (SELECT * FROM ${db.s}.windows w WHERE w.job = j.name AND w.scheduled_at IS NULL
            AND w.first_started_at >= $2 AND w.first_started_at < $3 ORDER BY w.first_started_at DESC LIMIT $4)) w
     UNION ALL
     SELECT * FROM (
       SELECT DISTINCT ON (e.job, e.window_key) e.job, e.window_key, ${epochMs('e.db_time')}, 0, NULL::int, NULL::text,
              ${skipReasonSql('e.kind')}, e.detail ->> 'scheduled_at'
         FROM ${db.s}.events e
        WHERE e.kind IN (${SKIP_KINDS_SQL}) AND e.db_time >= $2::timestamptz - interval '1 hour' AND e.db_time < $3
          AND e.job = ANY($1::text[]) AND e.window_key IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM ${db.s}.windows w WHERE w.job = e.job AND w.window_key = e.window_key)
        ORDER BY e.job, e.window_key, e.seq DESC LIMIT $5) s`,
    [jobs, from, to, perJob, perJob * jobs.length],
  );
  return rows.flatMap((r) => {
    const scheduled = r.scheduled_text === null ? NaN : Date.parse(r.scheduled_text);
    const at = new Date(Number.isNaN(scheduled) ? Number(r.at_ms) : scheduled);
    if (at < from || at >= to) return [];
    return [
      {
        job: r.job,
        window: r.window_key,
        at,
        reason: r.reason,
        attempts: r.attempts,
        maxAttempts: r.max_attempts,
        generation: r.generation,
      },
    ];
  });
}

export async function readEventCounts(db: Pg, kinds: readonly string[]): Promise<EventCount[]> {
  const { rows } = await db.query(`SELECT job, kind, host, n FROM ${db.s}.event_counts WHERE kind = ANY($1::text[])`, [
    kinds,
  ]);
  return rows.map((r) => ({ job: r.job, kind: r.kind, host: r.host, n: Number(r.n) }));
}
