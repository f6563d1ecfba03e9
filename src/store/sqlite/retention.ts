// Retention on the embedded store (`leasejob prune`): the same rules as store/postgres/retention.ts,
// each batch one short immediate transaction (a run waits for at most one batch), and the
// space given back with incremental vacuum.
import type BetterSqlite3 from 'better-sqlite3';
import { PRUNED_HOSTS, type RetentionRow, type RetentionStore } from '../contract.js';

/** Pages freed per incremental_vacuum step: each step is a write transaction runs may wait for. */
const VACUUM_STEP_PAGES = 2_000;

/** The final windows of a job scheduled before a horizon, but its latest completed one (`?` job, horizon, job). */
const PRUNABLE_WINDOWS = `
  FROM windows w
 WHERE w.job = ? AND w.scheduled_at < ? AND (w.completed_at IS NOT NULL OR w.outcome = 'missed')
   AND w.window_key IS NOT (SELECT lc.window_key FROM windows lc WHERE lc.job = ? AND lc.completed_at IS NOT NULL
                             ORDER BY lc.completed_at DESC, lc.generation DESC LIMIT 1)`;

export class SqliteRetention implements RetentionStore {
  constructor(private readonly db: BetterSqlite3.Database) {}

  async read(name?: string): Promise<{ dbNow: Date; jobs: RetentionRow[] }> {
    const rows = this.db
      .prepare(
        `SELECT j.name, j.max_delay_ms, j.window_format, j.window_offset, j.tz, t.retained_from, coalesce(t.pruned_through_seq,
          0) AS pruned_through_seq,
              coalesce(t.pruned_windows, 0) AS pruned_windows, l.acquired_at
         FROM jobs j LEFT JOIN retention t ON t.job = j.name LEFT JOIN leases l ON l.name = j.name
        WHERE ? IS NULL OR j.name = ? ORDER BY j.name`,
      )
      .all(name ?? null, name ?? null) as Array<Record<string, number | string | null>>;
    return {
      dbNow: new Date(),
      jobs: rows.map((r) => ({
        name: r.name as string,
        maxDelayMs: (r.max_delay_ms as number | null) ?? null,
        windowFormat: (r.window_format as string | null) ?? null,
        windowOffset: (r.window_offset as string | null) ?? null,
        tz: (r.tz as string | null) ?? null,
        retainedFrom: r.retained_from == null ? null : new Date(r.retained_from as number),
        prunedThroughSeq: Number(r.pruned_through_seq),
        prunedWindows: Number(r.pruned_windows),
        leaseAcquiredAt: r.acquired_at == null ? null : new Date(r.acquired_at as number),
      })),
    };
  }

  async raiseHorizon(jobs: readonly string[], horizon: Date): Promise<void> {
    const raise = this.db.prepare(
      `INSERT INTO retention (job, retained_from, pruned_at) VALUES (?, ?, ?)
       ON CONFLICT (job) DO UPDATE SET retained_from = max(coalesce(retained_from, excluded.retained_from),
         excluded.retained_from), pruned_at = excluded.pruned_at`,
    );
    const now = Date.now();
    this.db
      .transaction(() => {
        for (const job of jobs) raise.run(job, horizon.getTime(), now);
      })
      .immediate();
  }

  async pruneWindows(job: string, horizon: Date, limit: number): Promise<{ deleted: number; more: boolean }> {
    return this.db
      .transaction(() => {
        const keys = this.db
          .prepare(`SELECT w.window_key ${PRUNABLE_WINDOWS} ORDER BY w.scheduled_at LIMIT ?`)
          .pluck()
          .all(job, horizon.getTime(), job, limit) as string[];
        const del = this.db.prepare('DELETE FROM windows WHERE job = ? AND window_key = ?');
        for (const k of keys) del.run(job, k);
        if (keys.length)
          this.db
            .prepare('UPDATE retention SET pruned_windows = pruned_windows + ? WHERE job = ?')
            .run(keys.length, job);
        return { deleted: keys.length, more: keys.length >= limit };
      })
      .immediate();
  }

  async pruneEvents(
    job: string,
    before: Date,
    limit: number,
  ): Promise<{ deleted: number; throughSeq: number; more: boolean }> {
    return this.db
      .transaction(() => {
        const from = this.prunedThrough(job);
        const r = this.db
          .prepare('SELECT seq, db_time FROM events WHERE job = ? AND seq > ? ORDER BY seq LIMIT ?')
          .all(job, from, limit) as Array<{ seq: number; db_time: number }>;
        const stop = r.find((e) => e.db_time >= before.getTime());
        const gone = stop ? r.filter((e) => e.seq < stop.seq) : r;
        if (gone.length === 0) return { deleted: 0, throughSeq: from, more: false };
        const through = gone[gone.length - 1]!.seq;
        const n = this.db
          .prepare('DELETE FROM events WHERE job = ? AND seq > ? AND seq <= ?')
          .run(job, from, through).changes;
        this.db
          .prepare('UPDATE retention SET pruned_through_seq = ? WHERE job = ? AND pruned_through_seq < ?')
          .run(through, job, through);
        return { deleted: n, throughSeq: through, more: !stop && r.length >= limit };
      })
      .immediate();
  }

  async pruneHosts(before: Date, dryRun: boolean): Promise<number> {
    const t = before.getTime();
    const stale = (): number =>
      this.db
        .prepare(
          `SELECT count(*) FROM (SELECT host FROM hosts WHERE measured_at < ?
             UNION SELECT host FROM event_counts WHERE last_at < ? AND host <> ?)`,
        )
        .pluck()
        .get(t, t, PRUNED_HOSTS) as number;
    if (dryRun) return stale();
    return this.db
      .transaction(() => {
        const n = stale();
        this.db
          .prepare(
            `INSERT INTO event_counts (job, kind, host, n, last_at)
             SELECT job, kind, ?, sum(n), max(last_at) FROM event_counts WHERE last_at < ? AND host <> ? GROUP BY job, kind
             ON CONFLICT (job, kind, host) DO UPDATE SET n = n + excluded.n`,
          )
          .run(PRUNED_HOSTS, t, PRUNED_HOSTS);
        this.db.prepare('DELETE FROM event_counts WHERE last_at < ? AND host <> ?').run(t, PRUNED_HOSTS);
        this.db.prepare('DELETE FROM hosts WHERE measured_at < ?').run(t);
        return n;
      })
      .immediate();
  }

  async countPrunable(job: string, horizon: Date, eventsBefore: Date): Promise<{ events: number; windows: number }> {
    const from = this.prunedThrough(job);
    const stop = this.db
      .prepare('SELECT min(seq) FROM events WHERE job = ? AND seq > ? AND db_time >= ?')
      .pluck()
      .get(job, from, eventsBefore.getTime()) as number | null;
    const events = this.db
      .prepare('SELECT count(*) FROM events WHERE job = ? AND seq > ? AND (? IS NULL OR seq < ?)')
      .pluck()
      .get(job, from, stop, stop) as number;
    const windows = this.db
      .prepare(`SELECT count(*) ${PRUNABLE_WINDOWS}`)
      .pluck()
      .get(job, horizon.getTime(), job) as number;
    return { events, windows };
  }

  /**
   * A file made by this leasejob has auto_vacuum = INCREMENTAL: freed pages go back to the file
   * system in steps, each a short write transaction. An older file has none; switching needs a
   * VACUUM, which rewrites the whole file and holds every run meanwhile: only with `full`.
   */
  async reclaimSpace(opts: { full: boolean }): Promise<{ mode: 'incremental' | 'full' | 'none'; freedBytes: number }> {
    const pageSize = this.db.pragma('page_size', { simple: true }) as number;
    const pages = (): number => this.db.pragma('page_count', { simple: true }) as number;
    const before = pages();
    let mode: 'incremental' | 'full' | 'none';
    if (opts.full) {
      this.db.pragma('auto_vacuum = INCREMENTAL');
      this.db.exec('VACUUM');
      mode = 'full';
    } else if ((this.db.pragma('auto_vacuum', { simple: true }) as number) === 2) {
      while ((this.db.pragma('freelist_count', { simple: true }) as number) > 0) {
        const left = this.db.pragma('freelist_count', { simple: true }) as number;
        this.db.pragma(`incremental_vacuum(${VACUUM_STEP_PAGES})`);
        if ((this.db.pragma('freelist_count', { simple: true }) as number) >= left) break;
      }
      mode = 'incremental';
    } else {
      return { mode: 'none', freedBytes: 0 };
    }
    // In WAL mode the file shrinks at a checkpoint; TRUNCATE also empties the WAL itself.
    this.db.pragma('wal_checkpoint(TRUNCATE)');
    return { mode, freedBytes: Math.max(0, before - pages()) * pageSize };
  }

  private prunedThrough(job: string): number {
    return (
      (this.db.prepare('SELECT pruned_through_seq FROM retention WHERE job = ?').pluck().get(job) as
        number | undefined) ?? 0
    );
  }
}
