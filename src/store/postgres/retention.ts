// Retention on PostgreSQL (`leasejob prune`): each batch one statement, its own transaction,
// touching only rows no run writes again (final windows, old events) and the retention row,
// never a jobs or leases row, so a concurrent run never waits on a prune's locks.
import type pg from 'pg';
import { PRUNED_HOSTS, type RetentionRow, type RetentionStore } from '../contract.js';

type Query = (text: string, values: unknown[]) => Promise<pg.QueryResult>;

export class PgRetention implements RetentionStore {
  /** `s`: the quoted schema name. */
  constructor(
    private readonly query: Query,
    private readonly s: string,
  ) {}

  async read(name?: string): Promise<{ dbNow: Date; jobs: RetentionRow[] }> {
    const s = this.s;
    const { rows } = await this.query(
      `SELECT now() AS db_now, j.name, j.max_delay_ms, j.window_format, j.window_offset, j.tz, t.retained_from,
        coalesce(t.pruned_through_seq, 0) AS pruned_through_seq,
              coalesce(t.pruned_windows, 0) AS pruned_windows, l.acquired_at
         FROM (SELECT 1) one
         LEFT JOIN ${s}.jobs j ON $1::text IS NULL OR j.name = $1
         LEFT JOIN ${s}.retention t ON t.job = j.name
         LEFT JOIN ${s}.leases l ON l.name = j.name
        ORDER BY j.name`,
      [name ?? null],
    );
    return {
      dbNow: rows[0].db_now,
      jobs: rows
        .filter((r) => r.name !== null)
        .map((r) => ({
          name: r.name,
          maxDelayMs: r.max_delay_ms === null ? null : Number(r.max_delay_ms),
          windowFormat: r.window_format,
          windowOffset: r.window_offset,
          tz: r.tz,
          retainedFrom: r.retained_from,
          prunedThroughSeq: Number(r.pruned_through_seq),
          prunedWindows: Number(r.pruned_windows),
          leaseAcquiredAt: r.acquired_at,
        })),
    };
  }

  async raiseHorizon(jobs: readonly string[], horizon: Date): Promise<void> {
    // Only retention rows are locked, which acquire() reads without a lock.
    await this.query(
      `INSERT INTO ${this.s}.retention AS t (job, retained_from, pruned_at) SELECT unnest($1::text[]), $2, now()
       ON CONFLICT (job) DO UPDATE SET retained_from = greatest(t.retained_from, EXCLUDED.retained_from), pruned_at = now()`,
      [jobs, horizon],
    );
  }

  async pruneWindows(job: string, horizon: Date, limit: number): Promise<{ deleted: number; more: boolean }> {
    const s = this.s;
    // The DELETE checks finality again on the row it locks: a window claimed again (--rerun)
    // since the candidates were read is open, and stays.
    const { rows } = await this.query(
      `WITH keep AS (
         SELECT lc.window_key FROM ${s}.windows lc WHERE lc.job = $1 AND lc.completed_at IS NOT NULL
          ORDER BY lc.completed_at DESC, lc.generation DESC LIMIT 1),
       c AS (
         SELECT w.window_key FROM ${s}.windows w
          WHERE w.job = $1 AND w.scheduled_at < $2 AND (w.completed_at IS NOT NULL OR w.outcome = 'missed')
            AND w.window_key IS DISTINCT FROM (SELECT window_key FROM keep)
          ORDER BY w.scheduled_at LIMIT $3),
       d AS (
         DELETE FROM ${s}.windows w USING c
          WHERE w.job = $1 AND w.window_key = c.window_key AND (w.completed_at IS NOT NULL OR w.outcome = 'missed')
         RETURNING 1),
       m AS (SELECT count(*) AS n FROM d),
       u AS (
         UPDATE ${s}.retention t SET pruned_windows = t.pruned_windows + m.n FROM m
          WHERE t.job = $1 AND m.n > 0 RETURNING 1)
       SELECT m.n, (SELECT count(*) FROM c) AS candidates, (SELECT count(*) FROM u) AS counted FROM m`,
      [job, horizon, limit],
    );
    return { deleted: Number(rows[0].n), more: Number(rows[0].candidates) >= limit };
  }

  async pruneEvents(
    job: string,
    before: Date,
    limit: number,
  ): Promise<{ deleted: number; throughSeq: number; more: boolean }> {
    const s = this.s;
    // A prefix of the job's sequence: from the first event not yet pruned up to the first one
    // written at or after `before` (seq order, not db_time order: db_time is each transaction's
    // start, so it may step back by a few milliseconds between neighbours).
    const { rows } = await this.query(
      `WITH p AS (SELECT coalesce((SELECT t.pruned_through_seq FROM ${s}.retention t WHERE t.job = $1), 0) AS seq),
       r AS (
         SELECT e.seq, e.db_time FROM ${s}.events e
          WHERE e.job = $1 AND e.seq > (SELECT seq FROM p) ORDER BY e.seq LIMIT $3),
       stop AS (SELECT min(r.seq) AS seq FROM r WHERE r.db_time >= $2),
       d AS (
         DELETE FROM ${s}.events e USING r
          WHERE e.job = $1 AND e.seq = r.seq AND ((SELECT seq FROM stop) IS NULL OR r.seq < (SELECT seq FROM stop))
         RETURNING e.seq),
       m AS (SELECT count(*) AS n, max(d.seq) AS through FROM d),
       u AS (
         UPDATE ${s}.retention t SET pruned_through_seq = m.through FROM m
          WHERE t.job = $1 AND m.through > t.pruned_through_seq RETURNING t.pruned_through_seq)
       SELECT m.n, coalesce((SELECT pruned_through_seq FROM u), (SELECT seq FROM p)) AS through,
              (SELECT seq FROM stop) AS stop_seq, (SELECT count(*) FROM r) AS scanned
         FROM m`,
      [job, before, limit],
    );
    const r = rows[0];
    return {
      deleted: Number(r.n),
      throughSeq: Number(r.through),
      more: r.stop_seq === null && Number(r.scanned) >= limit,
    };
  }

  async pruneHosts(before: Date, dryRun: boolean): Promise<number> {
    const s = this.s;
    // One statement: a run that records an event meanwhile updates its row's last_at, and the
    // DELETE re-checks the row it locks, so a host seen again stays.
    const { rows } = await this.query(
      dryRun
        ? `SELECT count(*) AS n FROM (SELECT host FROM ${s}.hosts WHERE measured_at < $1
             UNION SELECT host FROM ${s}.event_counts WHERE last_at < $1 AND host <> $2) x`
        : `WITH h AS (DELETE FROM ${s}.hosts WHERE measured_at < $1 RETURNING host),
           gone AS (DELETE FROM ${s}.event_counts c WHERE c.last_at < $1 AND c.host <> $2 RETURNING job, kind, host, n, last_at),
           f AS (
             INSERT INTO ${s}.event_counts AS c (job, kind, host, n, last_at)
             SELECT job, kind, $2, sum(n), max(last_at) FROM gone GROUP BY job, kind
             ON CONFLICT (job, kind, host) DO UPDATE SET n = c.n + EXCLUDED.n RETURNING 1)
           SELECT count(*) AS n, (SELECT count(*) FROM f) AS folded FROM (SELECT host FROM h UNION SELECT host FROM gone) x`,
      [before, PRUNED_HOSTS],
    );
    return Number(rows[0].n);
  }

  async countPrunable(job: string, horizon: Date, eventsBefore: Date): Promise<{ events: number; windows: number }> {
    const s = this.s;
    const { rows } = await this.query(
      `WITH p AS (SELECT coalesce((SELECT t.pruned_through_seq FROM ${s}.retention t WHERE t.job = $1), 0) AS seq),
       stop AS (SELECT min(e.seq) AS seq FROM ${s}.events e WHERE e.job = $1 AND e.seq > (SELECT seq FROM p) AND e.db_time >= $3)
       SELECT
         (SELECT count(*) FROM ${s}.events e WHERE e.job = $1 AND e.seq > (SELECT seq FROM p)
             AND ((SELECT seq FROM stop) IS NULL OR e.seq < (SELECT seq FROM stop))) AS events,
         (SELECT count(*) FROM ${s}.windows w
           WHERE w.job = $1 AND w.scheduled_at < $2 AND (w.completed_at IS NOT NULL OR w.outcome = 'missed')
             AND w.window_key IS DISTINCT FROM (
               SELECT lc.window_key FROM ${s}.windows lc WHERE lc.job = $1 AND lc.completed_at IS NOT NULL
                ORDER BY lc.completed_at DESC, lc.generation DESC LIMIT 1)) AS windows`,
      [job, horizon, eventsBefore],
    );
    return { events: Number(rows[0].events), windows: Number(rows[0].windows) };
  }
}
