// The embedded store for one host: SQLite (better-sqlite3) in WAL mode, shared by every
// process on the host through immediate transactions. Lease expiry is on the monotonic clock
// plus the boot id, so no wall-clock step can expire or extend a lease, and a reboot expires
// every lease. Same semantics as the PostgreSQL functions in sql/.
import { mkdirSync, readFileSync, statSync } from 'node:fs';
import { uptime } from 'node:os';
import path from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import Database from 'better-sqlite3';
import { monoNow } from '../../clock.js';
import { DatabaseError, UsageError } from '../../errors.js';
import { hostName } from '../../host-name.js';
import type { ReplicationReport } from '../../replication.js';
import { backoffMs } from '../../schedule/backoff.js';
import { migrateSqlite } from './schema.js';
import { checkStateFile } from './state-file-checks.js';
import { classifySqliteDriverError } from './errors.js';
import { SqliteRetention } from './retention.js';
import type {
  AcquireInput,
  AcquireRow,
  AdoptInput,
  AttemptBudget,
  BudgetRefusal,
  ClaimWindowInput,
  ClaimWindowRow,
  DueGroup,
  DueNotCompleted,
  EventCount,
  OccurrenceCount,
  FinishInput,
  HistoryEvent,
  HostClock,
  JobChange,
  JobRow,
  JobSettings,
  LeaseStore,
  MarkInput,
  OperatorResult,
  OperatorWrite,
  PauseInput,
  RecordEventInput,
  RecordMissedInput,
  RecordOutputInput,
  ReleaseInput,
  RenewRow,
  ReplaceAnswer,
  ReplaceRequest,
  ScheduleKey,
  WindowOutput,
  WindowRow,
  WindowStates,
} from '../contract.js';
import {
  claimedAs,
  expectedFrom,
  isNetworkError,
  JOB_CHANGES_WINDOW_MS,
  NOT_COMPLETED_LISTED,
  SKIP_KINDS_SQL,
  skipReasonSql,
} from '../contract.js';

/**
 * The driver's handle on `file`. better-sqlite3 loads its native module here, not on import: one
 * built for another Node.js fails here, said in one line with what to do (exit 69).
 */
function openDriver(file: string): BetterSqlite3.Database {
  try {
    return new Database(file, { timeout: BUSY_TIMEOUT_MS });
  } catch (err) {
    throw classifySqliteDriverError(err) ?? err;
  }
}

/** What is at `file`: `hidden` when a directory on the way cannot be searched by this user. */
function fileKind(file: string): 'file' | 'directory' | 'other' | 'missing' | 'hidden' {
  try {
    const st = statSync(file);
    return st.isFile() ? 'file' : st.isDirectory() ? 'directory' : 'other';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EACCES' ? 'hidden' : 'missing';
  }
}

/**
 * Milliseconds on a clock shared by every process of this host and untouched by wall-clock
 * steps: process.hrtime is CLOCK_MONOTONIC on Linux (since boot), mach_absolute_time on macOS,
 * QueryPerformanceCounter on Windows; all system-wide.
 */
export function hostMonotonicMs(): number {
  return Math.floor(monoNow());
}

/**
 * Identifies this boot, so monotonic readings from before a reboot are never compared with
 * readings after it. Linux has one; elsewhere the boot instant, rounded to a minute, stands in.
 */
export function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return `boot@${Math.round((Date.now() - uptime() * 1000) / 60_000)}`;
  }
}

// Waits for another process's transaction this long before failing: transactions here are a
// few statements, so anything longer means a stuck process, reported as a store error.
const BUSY_TIMEOUT_MS = 5_000;
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

interface JobRecord {
  name: string;
  schedule: string | null;
  tz: string | null;
  window_mode: string | null;
  window_format: string | null;
  window_offset: string | null;
  ttl_ms: number | null;
  max_delay_ms: number | null;
  alert_after_ms: number | null;
  alert_lookback_ms: number | null;
  expect_min_ms: number | null;
  expect_max_ms: number | null;
  version: number;
  paused_at: number | null;
  paused_until: number | null;
  pause_reason: string | null;
  paused_by: string | null;
}

interface LeaseRecord {
  name: string;
  owner: string;
  generation: number;
  acquired_at: number;
  renewed_at: number;
  released_at: number | null;
  renewed_mono: number;
  expires_mono: number;
  boot_id: string;
  ttl_ms: number;
  renew_interval_ms: number;
  window_key: string | null;
  holder_pid: number | null;
  /** Version 8: the window of the run that asked this generation to stop (run --on-busy replace). */
  replace_window: string | null;
  replace_generation: number | null;
}

const hostOf = (owner: string | undefined | null): string => (owner ? owner.split(':')[0] || 'unknown' : 'unknown');

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The newest open windows (oldest first), with the one of most failed attempts first when it is older. */
function withWorst(newest: JobRow['openWindows'], worst: string | null): JobRow['openWindows'] {
  if (worst === null) return newest;
  const w = JSON.parse(worst) as JobRow['openWindows'][number];
  return newest.some((n) => n.window === w.window) ? newest : [w, ...newest];
}

/** As the PostgreSQL store's: `exhausted` once a failed or lost window's attempts reached its budget. */
const budgetOutcome = (w: string): string =>
  `CASE WHEN ${w}.max_attempts IS NOT NULL AND ${w}.attempts >= ${w}.max_attempts AND ${w}.outcome IN ('failed', 'lost') ` +
  `THEN 'exhausted' ELSE ${w}.outcome END`;

/**
 * Every job with its lease, last completed window and newest open windows (`?` twice: a job
 * name, or NULL for all). Exported for the test that checks its plan uses the indexes.
 */
export const JOB_ROWS_SQL = `
  SELECT j.*, l.owner, l.generation, l.expires_mono, l.boot_id, l.acquired_at,
         (SELECT json_object('window', w.window_key, 'completed_at', w.completed_at, 'started_at', w.started_at, 'generation', w.generation)
            FROM windows w WHERE w.job = j.name AND w.completed_at IS NOT NULL
             -- A window marked ahead of its tick is final, never the latest completion (as PostgreSQL's 023).
             AND (w.scheduled_at IS NULL OR w.scheduled_at <= w.completed_at)
           ORDER BY w.completed_at DESC, w.generation DESC LIMIT 1) AS last,
         (SELECT json_group_array(json_object('window', o.window_key, 'attempts', o.attempts, 'outcome', ${budgetOutcome('o')},
           'generation', o.generation, 'maxAttempts', o.max_attempts))
            FROM (SELECT window_key, attempts, outcome, generation, max_attempts FROM windows w
                   WHERE w.job = j.name AND w.completed_at IS NULL
                   ORDER BY started_at DESC LIMIT 10) o) AS open,
         (SELECT json_object('window', w.window_key, 'attempts', w.attempts, 'outcome', ${budgetOutcome('w')},
           'generation', w.generation, 'maxAttempts', w.max_attempts)
            FROM windows w WHERE w.job = j.name AND w.completed_at IS NULL
           ORDER BY w.outcome NOT IN ('running', 'missed') DESC, w.attempts DESC, w.started_at DESC LIMIT 1) AS worst,
         (SELECT count(*) FROM windows w WHERE w.job = j.name AND w.completed_at IS NULL) AS open_count,
         (SELECT count(*) FROM events e WHERE e.job = j.name AND e.kind = 'job-changed' AND e.db_time > @since) AS recent_job_changes
    FROM jobs j LEFT JOIN leases l ON l.name = j.name
   WHERE @name IS NULL OR j.name = @name
   ORDER BY j.name`;

/**
 * The scheduled time of a window `leasejob mark` writes, when its key says it: an ISO-8601 key of
 * a --window-from-schedule job without format or offset (as mark_window in PostgreSQL), else null.
 */
function markedScheduledAt(job: JobRecord, window: string): number | null {
  if (job.window_mode !== 'schedule' || job.window_format !== null || job.window_offset !== null) return null;
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(window)) return null;
  const at = Date.parse(window);
  return Number.isNaN(at) ? null : at;
}

export class SqliteStore implements LeaseStore {
  readonly kind = 'sqlite' as const;
  private readonly boot = bootId();
  private readonly host = hostName();

  readonly retention: SqliteRetention;

  private constructor(
    private readonly db: BetterSqlite3.Database,
    readonly location: string,
  ) {
    this.retention = new SqliteRetention(db);
  }

  /**
   * A SQLite error is never worth a retry (a busy file is waited for inside the driver); only a
   * bound of leasejob's own that ran out is (ETIMEDOUT: an answer given up after a signal).
   */
  isTransient(err: unknown): boolean {
    return isNetworkError(err);
  }

  static open(file: string, opts: { create?: boolean } = {}): SqliteStore {
    const dir = path.dirname(file);
    const kind = fileKind(file);
    if (kind === 'directory') {
      throw new UsageError(
        `the state file ${file} is a directory; give a file path (--state-file or LEASEJOB_STATE_FILE), ` +
          `e.g. ${path.join(file, 'leasejob.db')}.`,
      );
    }
    if (kind === 'other') {
      throw new UsageError(
        `the state file ${file} is not a regular file (a device, a FIFO or a socket); give the path of ` +
          `a file (--state-file or LEASEJOB_STATE_FILE).`,
      );
    }
    if (kind === 'hidden') {
      throw new DatabaseError(
        `state file ${file}: this user cannot look into its directory (EACCES); every command, status ` +
          `and history included, needs to write the state file and its directory: run it as the user that ` +
          `runs the jobs`,
        'E_STATE_FILE',
      );
    }
    if (opts.create === false && kind === 'missing') {
      throw new DatabaseError(
        `no embedded store at ${file}: no job has run with it. If the jobs run as another user, or with ` +
          `another --state-file, LEASEJOB_STATE_FILE or XDG_STATE_HOME, give theirs (and run as their ` +
          `user); \`leasejob migrate\` creates an empty one`,
        'E_STATE_FILE',
      );
    }
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
    } catch (err) {
      // A system account's home (/nonexistent), a read-only root filesystem: said in one line.
      const code = (err as NodeJS.ErrnoException).code ?? 'error';
      throw new DatabaseError(
        `state file ${file}: cannot create its directory ${dir} (${code}); give a writable --state-file ` +
          `or LEASEJOB_STATE_FILE, or set LEASEJOB_DATABASE_URL`,
        'E_STATE_FILE',
        { cause: err },
      );
    }
    checkStateFile(file, opts.create !== false);
    const db = openDriver(file);
    // A new file gives the pages `leasejob prune` frees back in steps (retention.ts).
    // Only takes effect before the first table exists; an older file keeps its mode until a
    // VACUUM (`prune --vacuum`).
    db.pragma('auto_vacuum = INCREMENTAL');
    // WAL: readers never block the writer; NORMAL is durable across process crashes, which is
    // what one host's ledger needs (a power loss may drop the last transaction).
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
    const store = new SqliteStore(db, file);
    migrateSqlite(db);
    return store;
  }

  private expired(l: LeaseRecord, nowMono: number): boolean {
    return l.boot_id !== this.boot || l.expires_mono <= nowMono;
  }

  /** The wall-clock instant matching a monotonic reading of this boot (for display only). */
  private wallOf(mono: number, nowMono: number, nowWall: number): Date {
    return new Date(nowWall + (mono - nowMono));
  }

  /** One event; as the PostgreSQL store's record_event (sql/007_lost_once.sql), one `lease-lost` per generation (0: not recorded). */
  private recordEventSync(e: RecordEventInput, now: number): number {
    if (
      e.kind === 'lease-lost' &&
      this.db
        .prepare("SELECT 1 FROM events WHERE job = ? AND kind = 'lease-lost' AND generation = ?")
        .get(e.job, Number(e.generation))
    )
      return 0;
    const job = this.db
      .prepare(
        `INSERT INTO jobs (name, last_seq, created_at, updated_at) VALUES (?, 1, ?, ?)
       ON CONFLICT (name) DO UPDATE SET last_seq = last_seq + 1 RETURNING last_seq`,
      )
      .get(e.job, now, now) as { last_seq: number };
    const host = hostOf(e.owner);
    this.db
      .prepare(
        `INSERT INTO events (job, seq, kind, window_key, owner, host, generation, db_time, host_time, detail)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(
        e.job,
        job.last_seq,
        e.kind,
        e.window ?? null,
        e.owner ?? null,
        host,
        e.generation === undefined ? null : Number(e.generation),
        now,
        e.hostTime.getTime(),
        JSON.stringify(stripNulls(e.detail ?? {})),
      );
    this.db
      .prepare(
        `INSERT INTO event_counts (job, kind, host, n, last_at) VALUES (?, ?, ?, 1, ?)
       ON CONFLICT (job, kind, host) DO UPDATE SET n = n + 1, last_at = excluded.last_at`,
      )
      .run(e.job, e.kind, host, now);
    return job.last_seq;
  }

  async acquire(i: AcquireInput): Promise<AcquireRow> {
    return this.db.transaction((): AcquireRow => this.acquireSync(i)).immediate();
  }

  /** acquire() inside its immediate transaction: nothing (a pause, a prune, a finish) comes between decision and lease. */
  private acquireSync(i: AcquireInput): AcquireRow {
    const now = Date.now();
    const nowMono = hostMonotonicMs();
    const jobChanged = i.spec ? this.registerJob(i, now) : undefined;
    const none = {
      generation: null,
      attempt: null,
      dbNow: new Date(now),
      holder: null,
      holderGeneration: null,
      holderWindow: null,
      expiresAt: null,
      completedAt: null,
      ...(jobChanged ? { jobChanged } : {}),
    };
    const gated = this.gateAcquire(i, now);
    if (gated) return { ...none, ...gated };
    // As sql/024 (acquire, attempt_budget): the budget and the backoff, before the lease.
    const refused = this.budgetRefusal(i, i.window, undefined, now);
    if (refused) return { ...none, ...refused };

    const prev = this.db.prepare('SELECT * FROM leases WHERE name = ?').get(i.job) as LeaseRecord | undefined;
    if (prev && !this.expired(prev, nowMono)) {
      // Slack of half an interval absorbs a slow renewal; a holder on this host whose process
      // is gone crashed, whatever its last renewal says.
      const overdue = nowMono > prev.renewed_mono + prev.renew_interval_ms * 1.5;
      const dead = prev.holder_pid !== null && hostOf(prev.owner) === this.host && !pidAlive(prev.holder_pid);
      return {
        ...none,
        outcome: overdue || dead ? 'stale' : 'busy',
        holder: prev.owner,
        holderGeneration: String(prev.generation),
        holderWindow: prev.window_key,
        expiresAt: this.wallOf(prev.expires_mono, nowMono, now),
      };
    }
    const generation = this.takeLease(i, prev, now, nowMono);
    // Asked again: an abandoned attempt found by the takeover (now lost) counts, as in sql/024.
    const spent = this.budgetRefusal(i, i.window, String(generation), now);
    if (spent) {
      this.db.prepare('UPDATE leases SET released_at = ?, expires_mono = ? WHERE name = ?').run(now, nowMono, i.job);
      return { ...none, ...spent };
    }
    const attempt = i.window !== undefined ? this.claimOwnWindow(i, generation, now) : 1;
    return { ...none, outcome: 'acquired', generation: String(generation), attempt };
  }

  /**
   * As sql/020's window_gate: the window done, before the retention horizon, the job paused, or
   * the occurrence past --max-delay: what the acquire answers instead of a lease (undefined: go on).
   */
  private gateAcquire(
    i: AcquireInput,
    now: number,
  ): { outcome: 'done'; completedAt: Date | null } | { outcome: 'missed' | 'paused' } | undefined {
    const gate = this.windowGate(i, now);
    if (gate.reason === 'done') return { outcome: 'done', completedAt: gate.completedAt };
    if (gate.reason === 'retention' && i.window !== undefined && i.scheduledAt) {
      this.recordOwnMissed(i, i.scheduledAt, now, {
        retained_from: new Date(gate.retainedFrom!).toISOString(),
        reason: 'retention',
      });
      return { outcome: 'missed' };
    }
    // As sql/012 (acquire, skip_paused): a paused job takes no lease and runs nothing; its
    // occurrence is recorded as skipped when it has no window yet.
    const job = this.db.prepare('SELECT * FROM jobs WHERE name = ?').get(i.job) as JobRecord | undefined;
    if (job && gate.reason === 'paused') {
      this.recordPausedSkip(i, job, now);
      return { outcome: 'paused' };
    }
    if (gate.reason === 'max-delay' && i.window !== undefined && i.scheduledAt) {
      this.recordOwnMissed(i, i.scheduledAt, now, { max_delay_ms: i.maxDelayMs, reason: 'max-delay' });
      return { outcome: 'missed' };
    }
    return undefined;
  }

  /** The acquire's own occurrence recorded missed (its window, if it has none yet, and the event). */
  private recordOwnMissed(i: AcquireInput, scheduledAt: Date, now: number, detail: Record<string, unknown>): void {
    this.db
      .prepare(
        `INSERT INTO windows (job, window_key, scheduled_at, owner, generation, attempts, first_started_at, started_at,
           finished_at, outcome)
         VALUES (?, ?, ?, ?, 0, 0, ?, ?, ?, 'missed') ON CONFLICT (job, window_key) DO NOTHING`,
      )
      .run(i.job, i.window, scheduledAt.getTime(), i.owner, now, now, now);
    this.recordEventSync(
      {
        job: i.job,
        kind: 'window-missed',
        window: i.window,
        owner: i.owner,
        hostTime: i.hostTime,
        detail: { scheduled_at: scheduledAt.toISOString(), ...detail },
      },
      now,
    );
  }

  /** A paused job's occurrence: the paused-skip event, and its window skipped when it has none yet. */
  private recordPausedSkip(i: AcquireInput, job: JobRecord, now: number): void {
    this.recordEventSync(
      {
        job: i.job,
        kind: 'paused-skip',
        window: i.window,
        owner: i.owner,
        hostTime: i.hostTime,
        detail: {
          reason: job.pause_reason,
          paused_by: job.paused_by,
          paused_at: iso(job.paused_at),
          paused_until: iso(job.paused_until),
          scheduled_at: i.scheduledAt?.toISOString(),
        },
      },
      now,
    );
    if (i.window === undefined) return;
    this.db
      .prepare(
        `INSERT INTO windows (job, window_key, scheduled_at, owner, generation, attempts, first_started_at, started_at,
           finished_at, completed_at, outcome)
         VALUES (?, ?, ?, ?, 0, 0, ?, ?, ?, ?, 'skipped') ON CONFLICT (job, window_key) DO NOTHING`,
      )
      .run(i.job, i.window, i.scheduledAt?.getTime() ?? null, i.owner, now, now, now, now);
  }

  /** The lease taken for the next generation (a free one, or a stale holder's taken over): the generation. */
  private takeLease(i: AcquireInput, prev: LeaseRecord | undefined, now: number, nowMono: number): number {
    const generation = (prev?.generation ?? 0) + 1;
    this.db
      .prepare(
        `INSERT INTO leases (name, owner, generation, acquired_at, renewed_at, released_at, renewed_mono, expires_mono, boot_id,
           ttl_ms, renew_interval_ms, window_key, holder_pid)
         VALUES (@name, @owner, @generation, @now, @now, NULL, @mono, @expires, @boot, @ttl, @renew, @window, @pid)
         ON CONFLICT (name) DO UPDATE SET owner = @owner, generation = @generation, acquired_at = @now, renewed_at = @now,
           released_at = NULL, renewed_mono = @mono, expires_mono = @expires, boot_id = @boot, ttl_ms = @ttl,
           renew_interval_ms = @renew, window_key = @window, holder_pid = @pid`,
      )
      .run({
        name: i.job,
        owner: i.owner,
        generation,
        now,
        mono: nowMono,
        expires: nowMono + i.ttlMs,
        boot: this.boot,
        ttl: i.ttlMs,
        renew: i.renewIntervalMs,
        window: i.window ?? null,
        pid: pidOf(i.owner),
      });
    const takeover = prev !== undefined && prev.released_at === null;
    this.recordEventSync(
      {
        job: i.job,
        kind: takeover ? 'stale-takeover' : 'acquired',
        window: i.window,
        owner: i.owner,
        generation: String(generation),
        hostTime: i.hostTime,
        detail: takeover ? { previous_owner: prev.owner, previous_generation: prev.generation } : {},
      },
      now,
    );
    // As sql/007_lost_once.sql: the generation taken over lost its lease, said once, and its
    // unfinished window is lost (not when it was this very runner's unanswered acquisition).
    if (takeover && prev.owner !== i.owner) this.recordTakenOver(i, prev, generation, now);
    return generation;
  }

  private recordTakenOver(i: AcquireInput, prev: LeaseRecord, generation: number, now: number): void {
    this.db
      .prepare(
        `UPDATE windows SET outcome = 'lost', finished_at = ?
          WHERE job = ? AND generation = ? AND completed_at IS NULL AND outcome = 'running'`,
      )
      .run(now, i.job, prev.generation);
    this.recordEventSync(
      {
        job: i.job,
        kind: 'lease-lost',
        window: prev.window_key ?? undefined,
        owner: prev.owner,
        generation: String(prev.generation),
        hostTime: i.hostTime,
        detail: { recorded_by: 'takeover', taken_by: i.owner, taken_generation: generation },
      },
      now,
    );
  }

  /**
   * A window claimed for `generation` (acquire's own, or one of a sequence's): its row started
   * again, its attempt counted; undefined when it is completed and this is not a rerun.
   */
  private claimRow(
    i: AttemptBudget & {
      job: string;
      window: string;
      scheduledAt?: Date | undefined;
      owner: string;
      rerun?: boolean | undefined;
      detail?: Record<string, unknown> | undefined;
    },
    generation: number,
    now: number,
  ): { attempts: number } | undefined {
    // claimed_as: the latest claim's (a run's own resets it), as PostgreSQL's claim_window().
    return this.db
      .prepare(
        `INSERT INTO windows (job, window_key, scheduled_at, owner, generation, first_started_at, started_at, max_attempts,
           claimed_as)
         VALUES (@job, @window, @scheduled, @owner, @generation, @now, @now, @max, @claimedAs)
         ON CONFLICT (job, window_key) DO UPDATE SET owner = @owner, generation = @generation, attempts = attempts + 1,
           started_at = @now, finished_at = NULL, completed_at = NULL, outcome = 'running', exit_code = NULL,
           scheduled_at = coalesce(scheduled_at, @scheduled), max_attempts = @max, claimed_as = @claimedAs
         WHERE completed_at IS NULL OR @rerun
         RETURNING attempts`,
      )
      .get({
        job: i.job,
        window: i.window,
        scheduled: i.scheduledAt?.getTime() ?? null,
        owner: i.owner,
        generation,
        now,
        rerun: i.rerun ? 1 : 0,
        max: i.maxAttempts ?? null,
        claimedAs: claimedAs(i.detail),
      }) as { attempts: number } | undefined;
  }

  /** The acquire's own window claimed for `generation`: its attempt. */
  private claimOwnWindow(i: AcquireInput, generation: number, now: number): number {
    // A run's own claim: claimed_as reset, whatever claimed the window before.
    const claimed = this.claimRow({ ...i, window: i.window!, detail: undefined }, generation, now);
    if (!claimed)
      throw new Error('window completed while its lease was free (cannot happen inside one immediate transaction)');
    const attempt = claimed.attempts;
    this.recordEventSync(
      {
        job: i.job,
        kind: 'window-claimed',
        window: i.window,
        owner: i.owner,
        generation: String(generation),
        hostTime: i.hostTime,
        detail: { attempt, scheduled_at: i.scheduledAt?.toISOString(), rerun: i.rerun },
      },
      now,
    );
    return attempt;
  }

  /**
   * As register_job (sql/012_versions_pause_mark.sql): unchanged settings write nothing; a run
   * with no schedule settings never erases a registered schedule; a change is adopted, bumps
   * the version, and (when a schedule is involved) is a job-changed event, returned.
   */
  private registerJob(i: AcquireInput, now: number): JobChange | undefined {
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
    const old = this.db.prepare('SELECT * FROM jobs WHERE name = ?').get(i.job) as JobRecord | undefined;
    if (!old) {
      this.db
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
    const { version } = this.db
      .prepare(
        `UPDATE jobs SET schedule = @schedule, tz = @tz, window_mode = @window_mode, window_format = @window_format,
          window_offset = @window_offset,
         ttl_ms = @ttl_ms, max_delay_ms = @max_delay_ms, alert_after_ms = @alert_after_ms, alert_lookback_ms = @alert_lookback_ms,
         expect_min_ms = @expect_min_ms, expect_max_ms = @expect_max_ms, updated_at = @now, version = version + 1
       WHERE name = @name RETURNING version`,
      )
      .get({ name: i.job, ...next, now }) as { version: number };
    if (old.window_mode === null || (old.schedule === null && next.schedule === null)) return undefined;
    this.recordEventSync(
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

  /** The job, locked for this immediate transaction, or the answer when it cannot be written (unknown, conflict). */
  private operatorJob(i: OperatorWrite, now: number): { job: JobRecord } | { refused: OperatorResult } {
    const job = this.db.prepare('SELECT * FROM jobs WHERE name = ?').get(i.job) as JobRecord | undefined;
    const dbNow = new Date(now);
    if (!job) return { refused: { status: 'unknown', version: null, seq: null, dbNow } };
    if (i.expectVersion !== undefined && job.version !== i.expectVersion)
      return { refused: { status: 'conflict', version: job.version, seq: null, dbNow } };
    return { job };
  }

  private bumpVersion(job: string, now: number): number {
    return (
      this.db
        .prepare('UPDATE jobs SET version = version + 1, updated_at = ? WHERE name = ? RETURNING version')
        .get(now, job) as { version: number }
    ).version;
  }

  async pause(i: PauseInput): Promise<OperatorResult> {
    return this.db
      .transaction((): OperatorResult => {
        const now = Date.now();
        const got = this.operatorJob(i, now);
        if ('refused' in got) return got.refused;
        const { job } = got;
        const until = i.until !== undefined ? i.until.getTime() : i.untilMs !== undefined ? now + i.untilMs : null;
        if (until !== null && until <= now)
          return { status: 'bad-until', version: job.version, seq: null, dbNow: new Date(now) };
        const wasPaused = isPaused(job, now);
        this.db
          .prepare('UPDATE jobs SET paused_at = ?, paused_until = ?, pause_reason = ?, paused_by = ? WHERE name = ?')
          .run(wasPaused ? job.paused_at : now, until, i.reason ?? null, i.by, i.job);
        const version = this.bumpVersion(i.job, now);
        const seq = this.recordEventSync(
          {
            job: i.job,
            kind: 'paused',
            owner: i.by,
            hostTime: i.hostTime,
            detail: {
              reason: i.reason,
              until: iso(until),
              by: i.by,
              version,
              previous_version: job.version,
              was_paused: wasPaused,
            },
          },
          now,
        );
        return {
          status: 'done',
          version,
          seq: String(seq),
          dbNow: new Date(now),
          pausedUntil: until === null ? null : new Date(until),
        };
      })
      .immediate();
  }

  async resume(i: OperatorWrite): Promise<OperatorResult> {
    return this.db
      .transaction((): OperatorResult => {
        const now = Date.now();
        const got = this.operatorJob(i, now);
        if ('refused' in got) return got.refused;
        const { job } = got;
        if (!isPaused(job, now)) return { status: 'noop', version: job.version, seq: null, dbNow: new Date(now) };
        this.db.prepare('UPDATE jobs SET paused_until = ? WHERE name = ?').run(now, i.job);
        const version = this.bumpVersion(i.job, now);
        const seq = this.recordEventSync(
          {
            job: i.job,
            kind: 'resumed',
            owner: i.by,
            hostTime: i.hostTime,
            detail: {
              by: i.by,
              version,
              previous_version: job.version,
              paused_at: iso(job.paused_at),
              paused_by: job.paused_by,
              reason: job.pause_reason,
            },
          },
          now,
        );
        return { status: 'done', version, seq: String(seq), dbNow: new Date(now) };
      })
      .immediate();
  }

  async mark(i: MarkInput): Promise<OperatorResult> {
    return this.db
      .transaction((): OperatorResult => {
        const now = Date.now();
        const got = this.operatorJob(i, now);
        if ('refused' in got) return got.refused;
        const { job } = got;
        const lease = this.db.prepare('SELECT * FROM leases WHERE name = ?').get(i.job) as LeaseRecord | undefined;
        if (lease && !this.expired(lease, hostMonotonicMs()) && lease.window_key === i.window) {
          return {
            status: 'busy',
            version: job.version,
            seq: null,
            dbNow: new Date(now),
            holder: lease.owner,
            holderGeneration: String(lease.generation),
          };
        }
        const prev = this.db
          .prepare('SELECT outcome FROM windows WHERE job = ? AND window_key = ?')
          .get(i.job, i.window) as { outcome: string } | undefined;
        const version = this.bumpVersion(i.job, now);
        const seq = this.recordEventSync(
          {
            job: i.job,
            kind: 'window-marked',
            window: i.window,
            owner: i.by,
            hostTime: i.hostTime,
            detail: {
              outcome: i.outcome,
              reason: i.reason,
              by: i.by,
              version,
              previous_version: job.version,
              previous_outcome: prev?.outcome,
            },
          },
          now,
        );
        this.db
          .prepare(
            `INSERT INTO windows (job, window_key, scheduled_at, owner, generation, attempts, first_started_at, started_at,
              finished_at, completed_at, outcome)
         VALUES (@job, @window, @at, @by, 0, 0, @now, @now, @now, @now, @outcome)
         ON CONFLICT (job, window_key) DO UPDATE SET outcome = @outcome, finished_at = @now, completed_at = @now, exit_code = NULL,
           scheduled_at = coalesce(scheduled_at, @at), owner = @by, generation = 0`,
          )
          .run({
            job: i.job,
            window: i.window,
            at: markedScheduledAt(job, i.window),
            by: i.by,
            now,
            outcome: i.outcome,
          });
        return {
          status: 'done',
          version,
          seq: String(seq),
          dbNow: new Date(now),
          previousOutcome: prev?.outcome ?? null,
        };
      })
      .immediate();
  }

  async releaseLease(i: ReleaseInput): Promise<OperatorResult> {
    return this.db
      .transaction((): OperatorResult => {
        const now = Date.now();
        const nowMono = hostMonotonicMs();
        const got = this.operatorJob(i, now);
        if ('refused' in got) return got.refused;
        const { job } = got;
        const lease = this.db.prepare('SELECT * FROM leases WHERE name = ?').get(i.job) as LeaseRecord | undefined;
        if (!lease || this.expired(lease, nowMono))
          return { status: 'noop', version: job.version, seq: null, dbNow: new Date(now) };
        const holder = {
          holder: lease.owner,
          holderGeneration: String(lease.generation),
          holderWindow: lease.window_key,
        };
        // As acquire judges a stale holder: renewal overdue by half an interval, or its process gone.
        const live =
          !(nowMono > lease.renewed_mono + lease.renew_interval_ms * 1.5) &&
          !(lease.holder_pid !== null && hostOf(lease.owner) === this.host && !pidAlive(lease.holder_pid));
        if (live && !i.force)
          return { status: 'busy', version: job.version, seq: null, dbNow: new Date(now), ...holder, live };
        this.db.prepare('UPDATE leases SET expires_mono = ?, released_at = ? WHERE name = ?').run(nowMono, now, i.job);
        const version = this.bumpVersion(i.job, now);
        // detail.by stays 'admin': finish tells an owner's own release from this one by it.
        const seq = this.recordEventSync(
          {
            job: i.job,
            kind: 'released',
            window: lease.window_key ?? undefined,
            owner: lease.owner,
            generation: String(lease.generation),
            hostTime: i.hostTime,
            detail: { by: 'admin', operator: i.by, forced: i.force && live, live, version },
          },
          now,
        );
        return { status: 'done', version, seq: String(seq), dbNow: new Date(now), ...holder, live };
      })
      .immediate();
  }

  async renew(job: string, owner: string, generation: string, ttlMs: number): Promise<RenewRow | undefined> {
    return this.renewSync(job, owner, generation, ttlMs);
  }

  private renewSync(job: string, owner: string, generation: string, ttlMs: number): RenewRow | undefined {
    const now = Date.now();
    const nowMono = hostMonotonicMs();
    const r = this.db
      .prepare(
        `UPDATE leases SET renewed_mono = @mono, expires_mono = @expires, renewed_at = @now
        WHERE name = @job AND owner = @owner AND generation = @generation AND boot_id = @boot AND expires_mono > @mono AND
          released_at IS NULL`,
      )
      .run({
        job,
        owner,
        generation: Number(generation),
        mono: nowMono,
        expires: nowMono + ttlMs,
        now,
        boot: this.boot,
      });
    if (r.changes !== 1) return undefined;
    const asked = this.db
      .prepare('SELECT replace_window FROM leases WHERE name = ? AND replace_generation = ?')
      .get(job, Number(generation)) as { replace_window: string | null } | undefined;
    return { dbNow: new Date(now), expiresAt: new Date(now + ttlMs), replaceFor: asked?.replace_window ?? null };
  }

  /** See LeaseStore.requestReplace; as sql/functions/request_replace.sql. */
  async requestReplace(i: ReplaceRequest): Promise<ReplaceAnswer> {
    return this.db
      .transaction((): ReplaceAnswer => {
        const now = Date.now();
        const lease = this.db.prepare('SELECT * FROM leases WHERE name = ?').get(i.job) as LeaseRecord | undefined;
        if (!lease || lease.released_at !== null || this.expired(lease, hostMonotonicMs()))
          return { outcome: 'free', holder: null, holderGeneration: null, holderWindow: null };
        const holder = {
          holder: lease.owner,
          holderGeneration: String(lease.generation),
          holderWindow: lease.window_key,
        };
        if (lease.window_key === i.window) return { outcome: 'same-window', ...holder };
        const held = this.db
          .prepare('SELECT scheduled_at FROM windows WHERE job = ? AND window_key = ? AND generation = ?')
          .get(i.job, lease.window_key, lease.generation) as { scheduled_at: number | null } | undefined;
        const heldAt = held?.scheduled_at ?? null;
        if (lease.window_key === null || heldAt === null || heldAt >= i.scheduledAt.getTime())
          return { outcome: 'not-earlier', ...holder };
        if (lease.replace_generation !== lease.generation) {
          this.db
            .prepare('UPDATE leases SET replace_by = ?, replace_window = ?, replace_generation = ? WHERE name = ?')
            .run(i.requester, i.window, lease.generation, i.job);
          this.recordEventSync(
            {
              job: i.job,
              kind: 'replace-requested',
              window: lease.window_key,
              owner: lease.owner,
              generation: String(lease.generation),
              hostTime: i.hostTime,
              detail: { by: i.requester, for_window: i.window },
            },
            now,
          );
        }
        return { outcome: 'requested', ...holder };
      })
      .immediate();
  }

  /** See LeaseStore.adopt (a local acquire always answers; kept for the contract). */
  async adopt(i: AdoptInput): Promise<{ attempt: number; dbNow: Date; expiresAt: Date } | undefined> {
    return this.db
      .transaction(() => {
        const renewed = this.renewSync(i.job, i.owner, i.generation, i.ttlMs);
        if (!renewed) return undefined;
        const w =
          i.window === undefined
            ? undefined
            : (this.db
                .prepare('SELECT attempts FROM windows WHERE job = ? AND window_key = ? AND generation = ?')
                .get(i.job, i.window, Number(i.generation)) as { attempts: number } | undefined);
        return { attempt: w?.attempts ?? 1, ...renewed };
      })
      .immediate();
  }

  /** See LeaseStore.abandon. */
  async abandon(job: string, owner: string, hostTime: Date): Promise<string | undefined> {
    const lease = this.db
      .prepare('SELECT * FROM leases WHERE name = ? AND owner = ? AND released_at IS NULL')
      .get(job, owner) as LeaseRecord | undefined;
    if (!lease || this.expired(lease, hostMonotonicMs())) return undefined;
    const { held } = await this.finish({
      job,
      owner,
      generation: String(lease.generation),
      window: lease.window_key ?? undefined,
      outcome: 'none',
      hostTime,
    });
    return held ? String(lease.generation) : undefined;
  }

  async finish(i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
    return this.db
      .transaction(() => {
        const now = Date.now();
        const nowMono = hostMonotonicMs();
        const lease = this.db
          .prepare('SELECT * FROM leases WHERE name = ? AND owner = ? AND generation = ?')
          .get(i.job, i.owner, Number(i.generation)) as LeaseRecord | undefined;
        const held = lease !== undefined && !this.expired(lease, nowMono);
        // A retry of a finish that committed: this generation released the lease itself, whoever
        // has taken it since (as sql/008_finish_after_takeover.sql).
        if (
          !held &&
          this.db
            .prepare(
              `SELECT 1 FROM events WHERE job = ? AND generation = ? AND owner = ? AND kind = 'released' AND
                json_extract(detail, '$.by') IS NULL`,
            )
            .get(i.job, Number(i.generation), i.owner) !== undefined
        )
          return { held: true, dbNow: new Date(now) };
        const detail = i.detail ?? {};
        if (
          held &&
          i.window !== undefined &&
          (i.outcome === 'completed' || i.outcome === 'failed' || i.outcome === 'replaced')
        ) {
          this.db
            .prepare(
              `UPDATE windows SET outcome = @outcome, exit_code = @exit, finished_at = @now, completed_at = CASE WHEN @outcome
                = 'completed' THEN @now END
            WHERE job = @job AND window_key = @window AND generation = @generation`,
            )
            .run({
              outcome: i.outcome,
              exit: i.exitCode ?? null,
              now,
              job: i.job,
              window: i.window,
              generation: Number(i.generation),
            });
          this.recordEventSync(
            {
              job: i.job,
              kind: `window-${i.outcome}`,
              window: i.window,
              owner: i.owner,
              generation: i.generation,
              hostTime: i.hostTime,
              detail: {
                exit_code: i.exitCode,
                attempt: detail.attempt,
                duration_ms: detail.duration_ms,
                aborted: detail.aborted,
              },
            },
            now,
          );
        }
        if (typeof detail.offset_ms === 'number') {
          this.db
            .prepare(
              `INSERT INTO hosts (host, offset_ms, uncertainty_ms, measured_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (host) DO UPDATE SET offset_ms = excluded.offset_ms, uncertainty_ms = excluded.uncertainty_ms,
             measured_at = excluded.measured_at`,
            )
            .run(hostOf(i.owner), detail.offset_ms, Number(detail.uncertainty_ms ?? 0), now);
        }
        if (held) {
          this.db
            .prepare('UPDATE leases SET expires_mono = ?, released_at = ? WHERE name = ? AND generation = ?')
            .run(nowMono, now, i.job, Number(i.generation));
          this.recordEventSync(
            {
              job: i.job,
              kind: 'released',
              window: i.window,
              owner: i.owner,
              generation: i.generation,
              hostTime: i.hostTime,
            },
            now,
          );
        } else {
          this.recordLostSync(i, detail.aborted, now);
        }
        return { held, dbNow: new Date(now) };
      })
      .immediate();
  }

  /**
   * finish() and finishWindow() after the lease was lost: the window stays open for whoever
   * holds the lease now, its outcome `lost`, and the loss recorded (once per generation).
   */
  private recordLostSync(i: FinishInput, aborted: unknown, now: number): void {
    this.db
      .prepare(
        `UPDATE windows SET outcome = 'lost', finished_at = ? WHERE job = ? AND window_key = ? AND generation = ? AND completed_at IS NULL`,
      )
      .run(now, i.job, i.window ?? null, Number(i.generation));
    this.recordEventSync(
      {
        job: i.job,
        kind: 'lease-lost',
        window: i.window,
        owner: i.owner,
        generation: i.generation,
        hostTime: i.hostTime,
        detail: { outcome: i.outcome, aborted },
      },
      now,
    );
  }

  /** The lease as `owner` holds it as `generation`, live and not released; else undefined. */
  private heldLease(job: string, owner: string, generation: string, nowMono: number): LeaseRecord | undefined {
    const lease = this.db
      .prepare('SELECT * FROM leases WHERE name = ? AND owner = ? AND generation = ?')
      .get(job, owner, Number(generation)) as LeaseRecord | undefined;
    return lease !== undefined && !this.expired(lease, nowMono) && lease.released_at === null ? lease : undefined;
  }

  /** See LeaseStore.claimWindow; as sql/013_catch_up.sql's claim_window. */
  async claimWindow(i: ClaimWindowInput): Promise<ClaimWindowRow> {
    return this.db
      .transaction((): ClaimWindowRow => {
        const now = Date.now();
        const none = { attempt: null, completedAt: null, dbNow: new Date(now) };
        if (!this.heldLease(i.job, i.owner, i.generation, hostMonotonicMs())) return { ...none, outcome: 'not-held' };
        const gate = this.windowGate(i, now);
        if (gate.reason === 'done') return { ...none, outcome: 'done', completedAt: gate.completedAt };
        if (gate.reason === 'paused') {
          // As sql/020's window_refused: the sequence stops; this window stays open for after the resume.
          this.recordEventSync(
            {
              job: i.job,
              kind: 'paused-skip',
              window: i.window,
              owner: i.owner,
              generation: i.generation,
              hostTime: i.hostTime,
              detail: { scheduled_at: i.scheduledAt?.toISOString(), reason: 'paused' },
            },
            now,
          );
          return { ...none, outcome: 'paused' };
        }
        if (gate.reason === 'retention' || gate.reason === 'max-delay') {
          const why =
            gate.reason === 'retention'
              ? { retained_from: new Date(gate.retainedFrom!).toISOString() }
              : { max_delay_ms: i.maxDelayMs };
          this.markMissed(i.job, i.owner, i.generation, i.window, i.scheduledAt, now, true);
          this.recordEventSync(
            {
              job: i.job,
              kind: 'window-missed',
              window: i.window,
              owner: i.owner,
              generation: i.generation,
              hostTime: i.hostTime,
              detail: { scheduled_at: i.scheduledAt?.toISOString(), ...why, reason: gate.reason },
            },
            now,
          );
          return { ...none, outcome: 'missed' };
        }
        const refused = this.budgetRefusal(i, i.window, i.generation, now);
        if (refused) return { ...none, outcome: refused.outcome, attempt: refused.attempt, nextAt: refused.expiresAt };
        // The gate above found the window open (or a rerun): it is claimed.
        const claimed = this.claimRow(i, Number(i.generation), now)!;
        this.db.prepare('UPDATE leases SET window_key = ? WHERE name = ?').run(i.window, i.job);
        this.recordEventSync(
          {
            job: i.job,
            kind: 'window-claimed',
            window: i.window,
            owner: i.owner,
            generation: i.generation,
            hostTime: i.hostTime,
            detail: {
              ...(i.detail ?? {}),
              attempt: claimed.attempts,
              scheduled_at: i.scheduledAt?.toISOString(),
              rerun: i.rerun,
            },
          },
          now,
        );
        return { ...none, outcome: 'claimed', attempt: claimed.attempts };
      })
      .immediate();
  }

  /**
   * As sql/024's attempt_budget() and skip_budget(): the window's attempts spent (exhausted) or its
   * last failure too recent (backoff, expiresAt the next allowed time), recorded with its event;
   * undefined when it may run.
   */
  private budgetRefusal(
    i: AttemptBudget & { job: string; owner: string; rerun: boolean; hostTime: Date },
    key: string | undefined,
    generation: string | undefined,
    now: number,
  ): { outcome: BudgetRefusal; attempt: number; expiresAt: Date | null } | undefined {
    if (key === undefined || i.rerun || (i.maxAttempts === undefined && i.retryDelayMs === undefined)) return undefined;
    const w = this.db
      .prepare('SELECT attempts, outcome, finished_at, completed_at FROM windows WHERE job = ? AND window_key = ?')
      .get(i.job, key) as
      { attempts: number; outcome: string; finished_at: number | null; completed_at: number | null } | undefined;
    if (!w || w.completed_at !== null || (w.outcome !== 'failed' && w.outcome !== 'lost')) return undefined;
    let outcome: BudgetRefusal;
    let nextAt: number | null = null;
    if (i.maxAttempts !== undefined && w.attempts >= i.maxAttempts) outcome = 'exhausted';
    else if (i.retryDelayMs !== undefined && w.finished_at !== null) {
      nextAt = w.finished_at + backoffMs(i.retryDelayMs, w.attempts);
      if (nextAt <= now) return undefined;
      outcome = 'backoff';
    } else return undefined;
    this.recordEventSync(
      {
        job: i.job,
        kind: `${outcome}-skip`,
        window: key,
        owner: i.owner,
        generation,
        hostTime: i.hostTime,
        detail: {
          attempts: w.attempts,
          ...(i.maxAttempts !== undefined ? { max_attempts: i.maxAttempts } : {}),
          ...(nextAt !== null ? { next_at: new Date(nextAt).toISOString() } : {}),
        },
      },
      now,
    );
    if (outcome === 'exhausted')
      this.db
        .prepare('UPDATE windows SET max_attempts = ? WHERE job = ? AND window_key = ?')
        .run(i.maxAttempts, i.job, key);
    return { outcome, attempt: w.attempts, expiresAt: nextAt === null ? null : new Date(nextAt) };
  }

  /**
   * Whether a window may run now, and if not why: as sql/020's window_gate (done, retention,
   * paused, max-delay), the one decision acquire and claimWindow make, inside their immediate
   * transaction. A new condition is one more branch here.
   */
  private windowGate(
    i: {
      job: string;
      window?: string | undefined;
      scheduledAt?: Date | undefined;
      rerun: boolean;
      maxDelayMs?: number | undefined;
    },
    now: number,
  ): {
    reason: 'done' | 'retention' | 'paused' | 'max-delay' | null;
    completedAt: Date | null;
    retainedFrom: number | null;
  } {
    const r = { completedAt: null, retainedFrom: null };
    if (i.window !== undefined && !i.rerun) {
      const w = this.db
        .prepare('SELECT completed_at FROM windows WHERE job = ? AND window_key = ?')
        .get(i.job, i.window) as { completed_at: number | null } | undefined;
      if (w?.completed_at != null) return { ...r, reason: 'done', completedAt: new Date(w.completed_at) };
      const horizon = this.db.prepare('SELECT retained_from FROM retention WHERE job = ?').pluck().get(i.job) as
        number | null | undefined;
      if (i.scheduledAt && horizon != null && i.scheduledAt.getTime() < horizon)
        return { ...r, reason: 'retention', retainedFrom: horizon };
    }
    const job = this.db.prepare('SELECT paused_at, paused_until FROM jobs WHERE name = ?').get(i.job) as
      Pick<JobRecord, 'paused_at' | 'paused_until'> | undefined;
    if (job && isPaused(job, now)) return { ...r, reason: 'paused' };
    if (
      i.window !== undefined &&
      i.maxDelayMs !== undefined &&
      i.scheduledAt &&
      now - i.scheduledAt.getTime() > i.maxDelayMs
    )
      return { ...r, reason: 'max-delay' };
    return { ...r, reason: null };
  }

  /** A window recorded missed unless final (and, with `again`, even when missed already); whether it was. */
  private markMissed(
    job: string,
    owner: string,
    generation: string,
    key: string,
    scheduledAt: Date | undefined,
    now: number,
    again: boolean,
  ): boolean {
    const r = this.db
      .prepare(
        `INSERT INTO windows (job, window_key, scheduled_at, owner, generation, attempts, first_started_at, started_at,
          finished_at, outcome)
       VALUES (@job, @key, @at, @owner, @generation, 0, @now, @now, @now, 'missed')
       ON CONFLICT (job, window_key) DO UPDATE SET outcome = 'missed', finished_at = @now
       WHERE completed_at IS NULL AND (@again OR outcome <> 'missed')`,
      )
      .run({
        job,
        key,
        at: scheduledAt?.getTime() ?? null,
        owner,
        generation: Number(generation),
        now,
        again: again ? 1 : 0,
      });
    return r.changes === 1;
  }

  /** See LeaseStore.finishWindow; as sql/013_catch_up.sql's finish_window. */
  async finishWindow(i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
    return this.db
      .transaction(() => {
        const now = Date.now();
        const held = this.heldLease(i.job, i.owner, i.generation, hostMonotonicMs()) !== undefined;
        const w = this.db
          .prepare('SELECT outcome, finished_at FROM windows WHERE job = ? AND window_key = ? AND generation = ?')
          .get(i.job, i.window ?? null, Number(i.generation)) as
          { outcome: string; finished_at: number | null } | undefined;
        if (w?.finished_at != null && w.outcome === i.outcome) return { held: true, dbNow: new Date(now) };
        const detail = i.detail ?? {};
        if (held && (i.outcome === 'completed' || i.outcome === 'failed' || i.outcome === 'replaced')) {
          this.db
            .prepare(
              `UPDATE windows SET outcome = @outcome, exit_code = @exit, finished_at = @now, completed_at = CASE WHEN @outcome
                = 'completed' THEN @now END
            WHERE job = @job AND window_key = @window AND generation = @generation`,
            )
            .run({
              outcome: i.outcome,
              exit: i.exitCode ?? null,
              now,
              job: i.job,
              window: i.window ?? null,
              generation: Number(i.generation),
            });
          this.recordEventSync(
            {
              job: i.job,
              kind: `window-${i.outcome}`,
              window: i.window,
              owner: i.owner,
              generation: i.generation,
              hostTime: i.hostTime,
              detail: {
                exit_code: i.exitCode,
                attempt: detail.attempt,
                duration_ms: detail.duration_ms,
                aborted: detail.aborted,
              },
            },
            now,
          );
        } else if (!held) {
          this.recordLostSync(i, detail.aborted, now);
        }
        return { held, dbNow: new Date(now) };
      })
      .immediate();
  }

  /** See LeaseStore.recordMissed. */
  async recordMissed(i: RecordMissedInput): Promise<number | undefined> {
    return this.db
      .transaction((): number | undefined => {
        const now = Date.now();
        if (!this.heldLease(i.job, i.owner, i.generation, hostMonotonicMs())) return undefined;
        let n = 0;
        for (const w of i.windows) {
          if (!this.markMissed(i.job, i.owner, i.generation, w.key, w.scheduledAt, now, false)) continue;
          n += 1;
          this.recordEventSync(
            {
              job: i.job,
              kind: 'window-missed',
              window: w.key,
              owner: i.owner,
              generation: i.generation,
              hostTime: i.hostTime,
              detail: { scheduled_at: w.scheduledAt?.toISOString(), reason: i.reason },
            },
            now,
          );
        }
        return n;
      })
      .immediate();
  }

  /** See LeaseStore.readWindows. */
  async readWindows(job: string, keys: readonly string[]): Promise<WindowStates> {
    const now = Date.now();
    const registered = this.db.prepare('SELECT created_at FROM jobs WHERE name = ?').get(job) as
      { created_at: number } | undefined;
    const horizon = this.db.prepare('SELECT retained_from FROM retention WHERE job = ?').pluck().get(job) as
      number | null | undefined;
    const rows = this.db
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

  async recordEvent(e: RecordEventInput): Promise<string> {
    return String(this.db.transaction(() => this.recordEventSync(e, Date.now())).immediate());
  }

  async recordOutput(i: RecordOutputInput): Promise<boolean> {
    return this.db
      .transaction(
        () =>
          this.db
            .prepare(
              `UPDATE windows SET output_tail = ?, output_bytes = ?, output_generation = generation, output_attempt = attempts,
                output_at = ?
        WHERE job = ? AND window_key = ? AND generation = ?`,
            )
            .run(i.tail, i.bytes, Date.now(), i.job, i.window, Number(i.generation)).changes === 1,
      )
      .immediate();
  }

  async readOutputs(job: string, limit: number): Promise<WindowOutput[]> {
    const rows = this.db
      .prepare(
        `SELECT window_key, output_generation, output_attempt, outcome, exit_code, output_at, output_bytes, output_tail
         FROM windows WHERE job = ? AND output_at IS NOT NULL ORDER BY output_at DESC, window_key LIMIT ?`,
      )
      .all(job, limit) as Array<Record<string, unknown>>;
    return rows.map((r) => ({
      window: r.window_key as string,
      generation: String(r.output_generation),
      attempt: r.output_attempt as number,
      outcome: r.outcome as string,
      exitCode: (r.exit_code as number | null) ?? null,
      recordedAt: new Date(r.output_at as number),
      bytes: r.output_bytes as number,
      tail: r.output_tail as Buffer,
    }));
  }

  async release(job: string, hostTime: Date): Promise<{ owner: string; generation: string } | undefined> {
    return this.db
      .transaction(() => {
        const now = Date.now();
        const nowMono = hostMonotonicMs();
        const lease = this.db.prepare('SELECT * FROM leases WHERE name = ?').get(job) as LeaseRecord | undefined;
        if (!lease || this.expired(lease, nowMono)) return undefined;
        this.db.prepare('UPDATE leases SET expires_mono = ?, released_at = ? WHERE name = ?').run(nowMono, now, job);
        this.recordEventSync(
          {
            job,
            kind: 'released',
            window: lease.window_key ?? undefined,
            owner: lease.owner,
            generation: String(lease.generation),
            hostTime,
            detail: { by: 'admin' },
          },
          now,
        );
        return { owner: lease.owner, generation: String(lease.generation) };
      })
      .immediate();
  }

  async readJobRows(name?: string): Promise<{ dbNow: Date; rows: JobRow[] }> {
    const now = Date.now();
    const nowMono = hostMonotonicMs();
    const jobs = this.db.prepare(JOB_ROWS_SQL).all({ name: name ?? null, since: now - JOB_CHANGES_WINDOW_MS }) as Array<
      Record<string, unknown>
    >;
    return {
      dbNow: new Date(now),
      rows: jobs.map((r) => {
        const held = r.owner != null && r.boot_id === this.boot && (r.expires_mono as number) > nowMono;
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
          owner: (r.owner as string | null) ?? null,
          generation: r.generation == null ? null : String(r.generation),
          held,
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

  async readScheduleKeys(name?: string): Promise<{ dbNow: Date; keys: ScheduleKey[] }> {
    const rows = this.db
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

  async readDueNotCompleted(groups: DueGroup[], name?: string): Promise<DueNotCompleted[]> {
    // `IS` is SQLite's NULL-safe equality. One primary-key probe per (job, due window), as the
    // PostgreSQL store; a window without a row is expected only of a job registered by then,
    // and not before its retention horizon (expectedFrom).
    const jobs = this.db.prepare(
      `SELECT name, created_at, (SELECT retained_from FROM retention t WHERE t.job = jobs.name) AS retained_from FROM jobs
        WHERE window_mode = 'schedule' AND schedule = ? AND tz IS ? AND window_format IS ? AND window_offset IS ?
          AND alert_after_ms IS ? AND alert_lookback_ms IS ? AND (? IS NULL OR name = ?)`,
    );
    const row = this.db.prepare(
      `SELECT ${budgetOutcome('windows')} AS outcome, generation, completed_at FROM windows WHERE job = ? AND window_key = ?`,
    );
    const out: DueNotCompleted[] = [];
    for (const g of groups) {
      const members = jobs.all(
        g.schedule,
        g.tz,
        g.windowFormat,
        g.windowOffset,
        g.alertAfterMs,
        g.alertLookbackMs,
        name ?? null,
        name ?? null,
      ) as Array<{ name: string; created_at: number; retained_from: number | null }>;
      for (const j of members) {
        const mine: DueNotCompleted[] = [];
        let count = 0;
        g.windows.forEach((w, k) => {
          const r = row.get(j.name, w.window) as
            { outcome: string; generation: number; completed_at: number | null } | undefined;
          if (r?.completed_at != null) return;
          if (r === undefined && w.scheduledAt.getTime() < expectedFrom(j.created_at, j.retained_from)) return;
          if (
            w.legacy !== undefined &&
            (row.get(j.name, w.legacy) as { completed_at: number | null } | undefined)?.completed_at != null
          )
            return;
          count++;
          // As the PostgreSQL store: the oldest few, and the group's latest window.
          if (count <= NOT_COMPLETED_LISTED || k === g.windows.length - 1)
            mine.push({
              job: j.name,
              count: 0,
              window: w.window,
              outcome: r?.outcome ?? null,
              generation: r ? String(r.generation) : null,
            });
        });
        for (const m of mine) m.count = count;
        out.push(...mine);
      }
    }
    return out;
  }

  async readHistory(job: string, limit: number, window?: string): Promise<HistoryEvent[]> {
    const rows = this.db
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

  async readJobWindows(job: string, limit: number): Promise<WindowRow[]> {
    const rows = this.db
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
      maxAttempts: (r.max_attempts as number | null) ?? null,
    }));
  }

  async readOccurrenceCounts(job?: string): Promise<OccurrenceCount[]> {
    const e = 'events e WHERE e.job = w.job AND e.window_key = w.window_key';
    const since = '@now - coalesce(j.alert_lookback_ms, 86400000)';
    // As PostgreSQL's (monitor/occurrences.ts judges one occurrence the same way); the skips
    // within the longest lookback through the partial index events_skips (sql/sqlite/indexes.sql),
    // the latest per window.
    return this.db
      .prepare(
        `SELECT job, reason, count(*) AS n FROM (
           SELECT w.job, CASE
             WHEN w.outcome = 'running' THEN 'running'
             WHEN w.outcome = 'replaced' THEN 'skipped-replaced'
             WHEN w.outcome IN ('failed', 'lost') THEN
               CASE WHEN w.max_attempts <= w.attempts THEN 'exhausted' ELSE 'failed' END
             WHEN w.outcome = 'missed' THEN coalesce((SELECT CASE WHEN json_extract(e.detail, '$.reason') = 'catch-up-limit'
                 THEN 'missed-catch-up-limit' WHEN json_type(e.detail, '$.max_delay_ms') IS NOT NULL THEN 'missed-max-delay' END
               FROM ${e} AND e.kind = 'window-missed' ORDER BY e.seq DESC LIMIT 1), 'missed-other')
             WHEN w.generation = 0 AND EXISTS (SELECT 1 FROM ${e} AND e.kind = 'window-marked') THEN 'skipped-marked'
             WHEN w.outcome = 'skipped' THEN 'skipped-paused'
             WHEN w.claimed_as = 'backfill' THEN 'backfilled'
             WHEN w.claimed_as = 'catch-up' THEN 'caught-up'
             ELSE 'completed' END AS reason
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

  async readEventCounts(kinds: readonly string[]): Promise<EventCount[]> {
    return this.db
      .prepare('SELECT job, kind, host, n FROM event_counts WHERE kind IN (SELECT value FROM json_each(?))')
      .all(JSON.stringify(kinds)) as EventCount[];
  }

  /** One file on one host: no replication, no failover (the tokens' epoch is always 0). */
  async readReplication(): Promise<ReplicationReport> {
    return {
      mode: 'embedded',
      standbys: null,
      synchronousStandbys: null,
      synchronousStandbyNames: null,
      synchronousCommit: null,
      timeline: null,
      fenceEpoch: 0,
      unchecked: [],
    };
  }

  async readHostClocks(): Promise<HostClock[]> {
    return (
      this.db.prepare('SELECT host, offset_ms, uncertainty_ms FROM hosts').all() as Array<{
        host: string;
        offset_ms: number;
        uncertainty_ms: number;
      }>
    ).map((h) => ({ host: h.host, offsetMs: h.offset_ms, uncertaintyMs: h.uncertainty_ms }));
  }

  async ping(): Promise<void> {
    this.db.prepare('SELECT 1').get();
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}

function isPaused(j: Pick<JobRecord, 'paused_at' | 'paused_until'>, now: number): boolean {
  return j.paused_at != null && (j.paused_until == null || j.paused_until > now);
}

const iso = (ms: number | null): string | undefined => (ms == null ? undefined : new Date(ms).toISOString());

function pidOf(owner: string): number | null {
  const pid = Number(owner.split(':')[1]);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

function stripNulls(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null && v !== undefined));
}
