// The PostgreSQL store: one parameterized statement per runner step (acquire+claim, renew,
// finish+release, record an event), each a call to a function created by sql/, and the
// set-based reads behind status, check and the exporter.
import { Writable } from 'node:stream';
import pg from 'pg';
import type pgpass from 'pgpass';
import { monoNow, sleep } from '../../clock.js';
import { passwordFileWarnings, type ConnectionSource } from './connection.js';
import { isTransientDbError, noAnswerWithin, wasRolledBack } from './db-errors.js';
import { quoteIdent } from '../../names.js';
import { PgRetention } from './retention.js';
import { acquireStatement, clockParam, skipRecorded, twoClockReading } from './acquire-two-clock.js';
import { offsetValues, renewStatement } from './renew-measured.js';
import type { ReplicationReadings, ReplicationReport } from '../../replication.js';
import { driverTls } from './tls.js';
import type {
  AcquireInput,
  AcquireRow,
  AttemptBudget,
  AdoptInput,
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
  RangeOccurrence,
} from '../contract.js';
import {
  ACQUIRE_LOCK_TIMEOUT_MS,
  EVENT_TIMEOUT_MS,
  expectedFrom,
  JOB_CHANGES_WINDOW_MS,
  NOT_COMPLETED_LISTED,
  SKIP_KINDS_SQL,
  skipReasonSql,
} from '../contract.js';

export interface PoolOptions {
  /**
   * Default 2. A runner uses one connection (its statements come one after another, and
   * renewals reuse the session whose pid the lease records); the second is opened only while
   * a statement waits on a connection gone silent, so finishing does not queue behind it.
   */
  max?: number;
  connectTimeoutMs?: number;
}

/**
 * How long a read (status, history, check, the exporter) or an administrative statement waits
 * for its answer. A connection can go silent without a reset (a NAT or firewall forgetting it):
 * nothing would ever end the wait. A timed-out connection is dropped; the next one is new.
 */
export const READ_TIMEOUT_MS = 10_000;

export function createPool(source: ConnectionSource, opts: PoolOptions = {}): pg.Pool {
  const driver = source.driver ?? driverTls(source.connectionString, process.env);
  const config: pg.PoolConfig = {
    ...(driver.connectionString ? { connectionString: driver.connectionString } : {}),
    ...(driver.ssl !== undefined ? { ssl: driver.ssl } : {}),
    ...(driver.sslnegotiation !== undefined ? { sslnegotiation: driver.sslnegotiation } : {}),
    max: opts.max ?? 2,
    // Keep the idle connection between renewals: its backend pid is the holder's liveness signal.
    idleTimeoutMillis: 0,
    connectionTimeoutMillis: opts.connectTimeoutMs ?? 5_000,
    keepAlive: true,
    application_name: 'leasejob',
    Client: PasswordFileClient,
  };
  const pool = new pg.Pool(config);
  // An idle client losing its server (restart, partition) must not crash the process; the next
  // query reconnects and renewal failures are handled by the lease keeper.
  pool.on('error', () => {});
  return pool;
}

/**
 * A client that reads ~/.pgpass (or PGPASSFILE) itself when no password was given, as pg 8 does,
 * but through the password callback pg asks for: its own reading prints a DeprecationWarning
 * (two lines that are not JSON) on stderr at every connection. Asked only when the server wants
 * a password; the same file, rules and matching (the pgpass package pg uses).
 */
class PasswordFileClient extends pg.Client {
  constructor(config?: pg.ClientConfig) {
    super(config);
    const self = this as unknown as { password: unknown };
    if (self.password == null) self.password = passwordFromFile;
  }
}

/**
 * One reading of the password file serves the connections opened within PASSWORD_FILE_REUSE_MS
 * (status and check open two at once): its warning about a file others may read is said once,
 * and a password changed in the file is still picked up by a long-running exporter.
 */
const PASSWORD_FILE_REUSE_MS = 10_000;
const passwordReadings = new Map<string, { at: number; password: Promise<string | undefined> }>();
function passwordFromFile(params: pgpass.ConnectionInfo): Promise<string | undefined> {
  const key = JSON.stringify([params.host, params.port, params.database, params.user]);
  const recent = passwordReadings.get(key);
  if (recent !== undefined && monoNow() - recent.at < PASSWORD_FILE_REUSE_MS) return recent.password;
  // Loaded then, not at start: most connections carry their password.
  const password = import('pgpass').then(({ default: read }) => {
    read.warnTo(passwordWarningSink());
    return new Promise<string | undefined>((resolve) => read(params, resolve));
  });
  passwordReadings.set(key, { at: monoNow(), password });
  return password;
}

/** Made on first use. pgpass writes each warning as one unterminated `WARNING: ...` string. */
let warningSink: Writable | undefined;
const passwordWarningSink = (): Writable =>
  (warningSink ??= new Writable({
    write(chunk: Buffer | string, _encoding, done): void {
      passwordFileWarnings.warn(
        String(chunk)
          .trim()
          .replace(/^WARNING: /, ''),
      );
      done();
    },
  }));

/**
 * A lease `l` held by a database session that is gone: its recorded backend is no longer there, or
 * is another session by its start time (as acquire() judges a crashed holder: sql/006). A
 * session the role may not see still shows its pid, with a null start: taken as alive.
 */
const HOLDER_GONE_SQL = (l: string): string =>
  `(${l}.expires_at > now() AND ${l}.backend_pid IS NOT NULL AND NOT EXISTS (
     SELECT 1 FROM pg_stat_get_activity(${l}.backend_pid) a
      WHERE a.pid = ${l}.backend_pid AND (a.backend_start IS NULL OR a.backend_start = ${l}.backend_start)))`;

/**
 * An instant as float8 milliseconds since the epoch, truncated to the millisecond as a
 * JavaScript Date holds it: truncated first, so float rounding cannot land a millisecond early.
 */
const epochMs = (expr: string): string => `round(date_part('epoch', date_trunc('milliseconds', ${expr})) * 1000)`;

/**
 * Marks an error from before a statement was sent (no connection: refused, timed out, too many
 * connections): whatever it was for cannot have happened. The runner reads `statementSent`.
 */
function notSent(err: unknown): unknown {
  if (typeof err === 'object' && err !== null && Object.isExtensible(err)) Object.assign(err, { statementSent: false });
  return err;
}

/** A server notice (pg's NoticeMessage, of which only these fields are read). */
interface Notice {
  message?: string | undefined;
  detail?: string | undefined;
}

/** The fields every operator function answers. */
function operatorRow(r: Record<string, unknown>): OperatorResult {
  return {
    status: r.status as OperatorResult['status'],
    version: r.version === null ? null : Number(r.version),
    seq: r.seq === null ? null : String(r.seq),
    dbNow: r.db_now as Date,
  };
}

/** How often a statement the server rolled back (40001, 40P01) is sent in all, at most. */
const ROLLBACK_TRIES = 8;
/** The longest random pause before sending it again. */
const ROLLBACK_PAUSE_MAX_MS = 250;
/** Sent again only with at least this much of its time limit left after the pause. */
const ROLLBACK_MIN_LEFT_MS = 250;

/** How long closing the pool may take before the process exits regardless. */
const CLOSE_LIMIT_MS = 2_000;

/** finish() and finish_window() take the same arguments, in this order. */
/**
 * A window's outcome as monitoring reports it: `exhausted` once a failed, lost or replaced window's
 * attempts reached the budget it was claimed (or refused) under (024).
 */
// A negative budget is run's default (031: -n failed attempts): reported as no budget, as before it.
const budgetOutcome = (w: string): string =>
  `CASE WHEN ${w}.max_attempts > 0 AND ${w}.attempts >= ${w}.max_attempts AND ${w}.outcome IN ('failed', 'lost', 'replaced') ` +
  `THEN 'exhausted' ELSE ${w}.outcome END`;

/** A window's budget as monitoring reports it: NULL for run's default (negative, 031). */
const reportedBudget = (w: string, dot = '.max_attempts'): string => `nullif(greatest(${w}${dot}, 0), 0)`;

/** The attempt budget as acquire() and claim_window() read it from their jsonb (024). */
const budgetFields = (b: AttemptBudget): Record<string, number> => ({
  ...(b.maxAttempts !== undefined ? { max_attempts: b.maxAttempts } : {}),
  ...(b.retryDelayMs !== undefined ? { retry_delay_ms: b.retryDelayMs } : {}),
});

/**
 * acquire()'s p_spec: the registry settings, the owner (register_job records who changed them;
 * it is not one of them) and the attempt budget (attempt_budget()), so that acquire's signature
 * stays as it is. None of them: NULL (nothing registered).
 */
function acquireSpec(i: AcquireInput): string | null {
  const budget = budgetFields(i);
  if (!i.spec && Object.keys(budget).length === 0) return null;
  return JSON.stringify({ ...i.spec, owner: i.owner, ...budget });
}

const finishParams = (i: FinishInput): unknown[] => [
  i.job,
  i.owner,
  i.generation,
  i.window ?? null,
  i.outcome,
  i.exitCode ?? null,
  i.hostTime,
  JSON.stringify(i.detail ?? {}),
];

export class PgStore implements LeaseStore {
  readonly kind = 'postgresql' as const;
  readonly location: string;

  private readonly s: string;
  readonly retention: PgRetention;

  constructor(
    readonly pool: pg.Pool,
    readonly schema: string,
    location = 'postgresql',
    /** The bound on reads and administrative statements; 0 for none (migrations). */
    private readonly readTimeoutMs = READ_TIMEOUT_MS,
  ) {
    this.s = quoteIdent(schema);
    this.location = location;
    this.retention = new PgRetention((text, values) => this.query(text, values), this.s);
  }

  /** The server restarting or unreachable, the connection dropped, a statement unanswered (db-errors.ts). */
  isTransient(err: unknown): boolean {
    return isTransientDbError(err);
  }

  /**
   * One statement, its connection and answer waited for at most `timeoutMs` together (pg's
   * own connect timeout, 5 s, is the longest a connection is ever waited for). A statement not
   * answered in time drops its connection (the pool opens a new one for the next); one whose
   * connection came too late is never sent (that connection goes back to the pool). The error
   * says what did not answer. 0: no bound (migrations).
   */
  private async query(
    text: string,
    values: unknown[] | ((leftMs: number) => unknown[]),
    timeoutMs = this.readTimeoutMs,
    notices?: Notice[],
  ): Promise<pg.QueryResult> {
    if (!(timeoutMs > 0)) return this.pool.query(text, typeof values === 'function' ? values(Infinity) : values);
    const started = monoNow();
    for (let tries = 1; ; tries++) {
      try {
        return await this.queryOnce(text, values, timeoutMs, started, notices);
      } catch (err) {
        // Rolled back whole (every statement here is its own transaction): nothing of it
        // happened, so it is sent again, after a random pause that lets contenders spread out.
        // Seen when the database's default isolation is repeatable read or serializable: a
        // contender whose snapshot predates the winner's commit fails instead of seeing it.
        // Not once the store is closing (a signal: nothing more may start), nor with too little
        // time left for an answer.
        const pauseMs = Math.random() * Math.min(ROLLBACK_PAUSE_MAX_MS, 10 * 2 ** tries);
        const leftAfterPause = timeoutMs - (monoNow() - started) - pauseMs;
        if (!wasRolledBack(err) || tries >= ROLLBACK_TRIES || leftAfterPause < ROLLBACK_MIN_LEFT_MS || this.closing)
          throw err;
        await sleep(pauseMs);
        if (this.closing) throw err;
      }
    }
  }

  /** One try of query(), within what is left of `timeoutMs` since `started`. */
  private async queryOnce(
    text: string,
    valuesOrFn: unknown[] | ((leftMs: number) => unknown[]),
    timeoutMs: number,
    started: number,
    notices?: Notice[],
  ): Promise<pg.QueryResult> {
    const client = await this.connectWithin(timeoutMs - (monoNow() - started), timeoutMs).catch((err: unknown) => {
      throw notSent(err);
    });
    // Values computed once the connection is ready: what they measure (the time left, the
    // host's wall time as the statement leaves: acquire-two-clock.ts) excludes the connect.
    const values = typeof valuesOrFn === 'function' ? valuesOrFn(timeoutMs - (monoNow() - started)) : valuesOrFn;
    // The server's notices during this statement (register_job's job-changed), when asked for.
    const onNotice = (n: Notice): void => {
      notices?.push(n);
    };
    if (notices) client.on('notice', onNotice);
    const unlisten = (): void => {
      if (notices) client.removeListener('notice', onNotice);
    };
    const left = Math.max(1, Math.ceil(timeoutMs - (monoNow() - started)));
    // As pool.query does. A checked-out client is not watched by the pool: an error it emits
    // (its server restarting) would be thrown at the top of the process. It fails the
    // statement instead; and a connection that failed a statement (no answer in time, the
    // connection itself failing) is not reused. One the server answered with an error is: it
    // is healthy, and it is the session a lease records (renewals keep it, so contenders do
    // not see the holder's session gone).
    return new Promise<pg.QueryResult>((resolve, reject) => {
      let done = false;
      const fail = (err: Error): void => {
        if (done) return;
        done = true;
        unlisten();
        client.release(err);
        reject(err.message === 'Query read timeout' ? noAnswerWithin(timeoutMs, err) : err);
      };
      client.once('error', fail);
      client.query({ text, values, query_timeout: left } as pg.QueryConfig).then(
        (result) => {
          client.removeListener('error', fail);
          if (done) return;
          done = true;
          unlisten();
          client.release();
          resolve(result);
        },
        (err: Error) => {
          client.removeListener('error', fail);
          if (err instanceof pg.DatabaseError && err.severity === 'ERROR') {
            if (done) return;
            done = true;
            unlisten();
            client.release();
            reject(err);
            return;
          }
          fail(err);
        },
      );
    });
  }

  /** A connection within `waitMs`; `reportedMs` is the bound the error names. */
  private async connectWithin(waitMs: number, reportedMs = waitMs): Promise<pg.PoolClient> {
    const pending = this.pool.connect();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(noAnswerWithin(reportedMs)), Math.max(1, Math.ceil(waitMs)));
    });
    try {
      return await Promise.race([pending, late]);
    } catch (err) {
      pending.then(
        (c) => c.release(),
        () => {},
      );
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  /** A connection being opened ahead of the first statement; its error, if it failed. */
  private early: Promise<unknown> | undefined;

  /**
   * Open the connection now, before the first statement is ready: the server starts a backend
   * and checks the password while the caller is still busy (loading modules). No statement
   * is sent. The first acquire() waits for it and reports its error, so an unreachable
   * database costs one connect timeout, not two.
   */
  connectEarly(): void {
    this.early ??= this.pool.connect().then(
      (c) => {
        c.release();
        return undefined;
      },
      (err: unknown) => err ?? new Error('connection failed'),
    );
  }

  async acquire(i: AcquireInput): Promise<AcquireRow> {
    if (this.early) {
      const failed = await this.early;
      this.early = undefined;
      if (failed) throw notSent(failed);
    }
    const notices: Notice[] = [];
    const send = (twoClock: boolean): Promise<pg.QueryResult> =>
      this.query(
        acquireStatement(this.s, twoClock),
        () => [
          i.job,
          i.owner,
          i.ttlMs,
          i.renewIntervalMs,
          i.window ?? null,
          i.scheduledAt ?? null,
          i.rerun,
          i.maxDelayMs ?? null,
          i.hostTime,
          acquireSpec(i),
          ACQUIRE_LOCK_TIMEOUT_MS,
          ...(twoClock ? [clockParam(i)] : []),
        ],
        i.answerTimeoutMs ?? this.readTimeoutMs,
        notices,
      );
    let result;
    try {
      result = await send(!this.beforeTwoClocks);
    } catch (err) {
      // A schema before 035 (a `migrate` pending): acquire() as before, the database clock alone.
      if (this.beforeTwoClocks || !isUndefinedFunction(err, 'acquire_two_clock')) throw err;
      this.beforeTwoClocks = true;
      result = await send(false);
    }
    const r = result.rows[0];
    const changed = notices.find((n) => n.message === 'leasejob:job-changed' && n.detail);
    const clocks = twoClockReading(r);
    // Only for a stale holder, whose wait is what a run then says: whether it crashed. Read in
    // the acquire's own statement from 035 (acquire_two_clock's holder_gone), else asked apart.
    const gone =
      r.outcome !== 'stale'
        ? undefined
        : 'holder_gone' in r
          ? r.holder_gone === true
          : await this.holderGone(i.job, r.holder_generation);
    return {
      ...(changed ? { jobChanged: JSON.parse(changed.detail as string) as JobChange } : {}),
      ...(gone ? { holderGone: true } : {}),
      outcome: r.outcome,
      generation: r.generation,
      attempt: r.attempt,
      dbNow: r.db_now,
      holder: r.holder,
      holderGeneration: r.holder_generation,
      holderWindow: r.holder_window,
      expiresAt: r.expires_at,
      completedAt: r.completed_at,
      ...(clocks ? { clocks } : {}),
      ...(skipRecorded(r) ? { skipRecorded: true } : {}),
    };
  }

  /** Set once the schema is found to predate 035: acquire() and renew(), without the two clocks. */
  private beforeTwoClocks = false;

  /**
   * Whether generation `generation` of the job's lease is held by a database session that is
   * gone (as acquire() judges it: sql/006_session_lookup.sql). Best effort: false when unknown.
   */
  private async holderGone(job: string, generation: string | null): Promise<boolean> {
    try {
      const { rows } = await this.query(
        `SELECT ${HOLDER_GONE_SQL('l')} AS gone FROM ${this.s}.leases l WHERE l.name = $1 AND l.generation = $2`,
        [job, generation],
      );
      return rows[0]?.gone === true;
    } catch {
      return false;
    }
  }

  /** Undefined when the lease is no longer ours (taken, expired or released). */
  async renew(
    job: string,
    owner: string,
    generation: string,
    ttlMs: number,
    lockTimeoutMs: number,
    answerTimeoutMs: number,
    offset?: { offsetMs: number; uncertaintyMs: number },
  ): Promise<RenewRow | undefined> {
    const renewal = (): Promise<RenewRow | undefined> =>
      this.renewOnce(job, owner, generation, ttlMs, lockTimeoutMs, answerTimeoutMs, offset);
    for (;;) {
      try {
        return await renewal();
      } catch (err) {
        // A lease taken on a schema before 035 (or 025) keeps renewing while `migrate` brings it
        // up to date: without the offset (or the replace request).
        if (!this.beforeTwoClocks && isUndefinedFunction(err, 'renew_measured')) this.beforeTwoClocks = true;
        else if (!this.noReplaceRequests && isUndefinedFunction(err, 'replace_requested'))
          this.noReplaceRequests = true;
        else throw err;
      }
    }
  }

  /** Set once the schema is found to predate 025: renewals then carry no replace request. */
  private noReplaceRequests = false;

  private async renewOnce(
    job: string,
    owner: string,
    generation: string,
    ttlMs: number,
    lockTimeoutMs: number,
    answerTimeoutMs: number,
    offset: { offsetMs: number; uncertaintyMs: number } | undefined,
  ): Promise<RenewRow | undefined> {
    const measured = !this.beforeTwoClocks;
    // Client-side bound: a black-holed connection is dropped and the next renewal reconnects.
    // Sent again (rolled back): its lock wait still ends 500 ms before the answer is given up on.
    const { rows } = await this.query(
      renewStatement(this.s, measured, !this.noReplaceRequests),
      (leftMs) => [
        job,
        owner,
        generation,
        ttlMs,
        Math.floor(Math.max(50, Math.min(lockTimeoutMs, leftMs - 500))),
        ...(measured ? offsetValues(offset) : []),
      ],
      answerTimeoutMs,
    );
    const r = rows[0];
    if (r && r.renewed === false) return { dbNow: r.db_now, expiresAt: r.db_now, notRenewed: true };
    return r ? { dbNow: r.db_now, expiresAt: r.expires_at, replaceFor: r.replace_for } : undefined;
  }

  async requestReplace(i: ReplaceRequest): Promise<ReplaceAnswer> {
    const { rows } = await this.query(
      `SELECT * FROM ${this.s}.request_replace($1, $2, $3, $4, $5)`,
      [i.job, i.window, i.scheduledAt, i.requester, i.hostTime],
      EVENT_TIMEOUT_MS,
    );
    const r = rows[0];
    return {
      outcome: r.outcome,
      holder: r.holder,
      holderGeneration: r.holder_generation === null ? null : String(r.holder_generation),
      holderWindow: r.holder_window,
    };
  }

  /** See LeaseStore.adopt: renew() as any renewal, and the attempt of the window that generation claimed. */
  async adopt(i: AdoptInput): Promise<{ attempt: number; dbNow: Date; expiresAt: Date } | undefined> {
    const { rows } = await this.query(
      `SELECT r.db_now, r.expires_at,
              (SELECT w.attempts FROM ${this.s}.windows w WHERE w.job = $1 AND w.window_key = $6 AND w.generation = $3) AS attempt
         FROM ${this.s}.renew($1, $2, $3, $4, $5) r`,
      [i.job, i.owner, i.generation, i.ttlMs, i.lockTimeoutMs, i.window ?? null],
      i.answerTimeoutMs,
    );
    const r = rows[0];
    return r ? { attempt: r.attempt ?? 1, dbNow: r.db_now, expiresAt: r.expires_at } : undefined;
  }

  /** See LeaseStore.abandon: finish() with no outcome, for the live lease this owner holds. */
  async abandon(job: string, owner: string, hostTime: Date, answerTimeoutMs: number): Promise<string | undefined> {
    const { rows } = await this.query(
      `SELECT l.generation, f.held
         FROM ${this.s}.leases l
        CROSS JOIN LATERAL ${this.s}.finish(l.name, l.owner, l.generation, l.window_key, 'none', NULL, $3, '{}') f
        WHERE l.name = $1 AND l.owner = $2 AND l.released_at IS NULL AND l.expires_at > now()`,
      [job, owner, hostTime],
      answerTimeoutMs,
    );
    return rows[0]?.held ? String(rows[0].generation) : undefined;
  }

  /** Record the window outcome (if still held) and release. held=false: the lease was not ours. */
  async finish(i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
    const { rows } = await this.query(
      `SELECT * FROM ${this.s}.finish($1, $2, $3, $4, $5, $6, $7, $8)`,
      finishParams(i),
      i.answerTimeoutMs ?? this.readTimeoutMs,
    );
    return { held: rows[0].held, dbNow: rows[0].db_now };
  }

  /** See LeaseStore.claimWindow (sql/013_catch_up.sql). */
  async claimWindow(i: ClaimWindowInput): Promise<ClaimWindowRow> {
    const { rows } = await this.query(
      `SELECT * FROM ${this.s}.claim_window($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
      [
        i.job,
        i.owner,
        i.generation,
        i.window,
        i.scheduledAt ?? null,
        i.rerun,
        i.maxDelayMs ?? null,
        i.hostTime,
        JSON.stringify({ ...i.detail, ...budgetFields(i) }),
      ],
      i.answerTimeoutMs ?? this.readTimeoutMs,
    );
    const r = rows[0];
    // For backoff, claim_window answers the next allowed time in completed_at (its signature kept).
    const backoff = r.outcome === 'backoff';
    return {
      outcome: r.outcome,
      attempt: r.attempt,
      completedAt: backoff ? null : r.completed_at,
      nextAt: backoff ? r.completed_at : null,
      dbNow: r.db_now,
    };
  }

  /** See LeaseStore.finishWindow: finish() without the release. */
  async finishWindow(i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
    const { rows } = await this.query(
      `SELECT * FROM ${this.s}.finish_window($1, $2, $3, $4, $5, $6, $7, $8)`,
      finishParams(i),
      i.answerTimeoutMs ?? this.readTimeoutMs,
    );
    return { held: rows[0].held, dbNow: rows[0].db_now };
  }

  /** See LeaseStore.recordMissed. */
  async recordMissed(i: RecordMissedInput): Promise<number | undefined> {
    const { rows } = await this.query(
      `SELECT ${this.s}.record_missed($1, $2, $3, $4::text[], $5::timestamptz[], $6, $7) AS n`,
      [
        i.job,
        i.owner,
        i.generation,
        i.windows.map((w) => w.key),
        i.windows.map((w) => w.scheduledAt ?? null),
        i.reason,
        i.hostTime,
      ],
      i.answerTimeoutMs ?? this.readTimeoutMs,
    );
    return rows[0].n === null ? undefined : Number(rows[0].n);
  }

  /** See LeaseStore.readWindows: one primary-key probe per key. */
  async readWindows(job: string, keys: readonly string[]): Promise<WindowStates> {
    const { rows } = await this.query(
      `SELECT ${epochMs('now()')} AS db_now_ms,
              -- From when the current schedule is expected: its registration or its change since (028).
              (SELECT ${epochMs('greatest(j.created_at, j.schedule_since)')} FROM ${this.s}.jobs j WHERE j.name = $1) AS registered_ms,
              (SELECT ${epochMs('t.retained_from')} FROM ${this.s}.retention t WHERE t.job = $1) AS retained_ms,
              (SELECT coalesce(json_agg(json_build_object('k', w.window_key, 'o', w.outcome, 'a', w.attempts, 'c',
                ${epochMs('w.completed_at')})), '[]'::json)
                 FROM ${this.s}.windows w WHERE w.job = $1 AND w.window_key = ANY($2::text[])) AS windows`,
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

  async recordEvent(e: RecordEventInput): Promise<string> {
    const { rows } = await this.query(
      `SELECT ${this.s}.record_event($1, $2, $3, $4, $5, $6, $7) AS seq`,
      [
        e.job,
        e.kind,
        e.window ?? null,
        e.owner ?? null,
        e.generation ?? null,
        e.hostTime,
        JSON.stringify(e.detail ?? {}),
      ],
      e.answerTimeoutMs ?? EVENT_TIMEOUT_MS,
    );
    return rows[0].seq;
  }

  async recordOutput(i: RecordOutputInput): Promise<boolean> {
    const { rows } = await this.query(
      `SELECT ${this.s}.record_output($1, $2, $3, $4, $5) AS recorded`,
      [i.job, i.window, i.generation, i.tail, i.bytes],
      i.answerTimeoutMs ?? EVENT_TIMEOUT_MS,
    );
    return rows[0].recorded === true;
  }

  async readOutputs(job: string, limit: number): Promise<WindowOutput[]> {
    let rows;
    try {
      ({ rows } = await this.query(
        `SELECT window_key, output_generation, output_attempt, outcome, exit_code, output_at, output_bytes, output_tail
           FROM ${this.s}.windows WHERE job = $1 AND output_at IS NOT NULL ORDER BY output_at DESC, window_key LIMIT $2`,
        [job, limit],
      ));
    } catch (err) {
      // A schema before 015 (sql/015_output_tail.sql) has no outputs to show.
      if ((err as { code?: unknown }).code === '42703') return [];
      throw err;
    }
    return rows.map((r) => ({
      window: r.window_key,
      generation: String(r.output_generation),
      attempt: r.output_attempt,
      outcome: r.outcome,
      exitCode: r.exit_code,
      recordedAt: r.output_at,
      bytes: Number(r.output_bytes),
      tail: r.output_tail,
    }));
  }

  /** Administrative release: expire now, keep the generation. */
  async release(job: string, hostTime: Date): Promise<{ owner: string; generation: string } | undefined> {
    const { rows } = await this.query(
      `WITH r AS (
         UPDATE ${this.s}.leases SET expires_at = now(), released_at = now()
          WHERE name = $1 AND expires_at > now()
         RETURNING owner, generation, window_key),
       -- As release_lease (027): the released generation's attempt still running is lost.
       w AS (
         UPDATE ${this.s}.windows w SET outcome = 'lost', finished_at = now() FROM r
          WHERE w.job = $1 AND w.generation = r.generation AND w.completed_at IS NULL AND w.outcome = 'running')
       SELECT r.owner, r.generation,
              ${this.s}.record_event($1, 'released', r.window_key, r.owner, r.generation, $2, '{"by":"admin"}') AS seq
         FROM r`,
      [job, hostTime],
    );
    return rows[0] ? { owner: rows[0].owner, generation: rows[0].generation } : undefined;
  }

  async pause(i: PauseInput): Promise<OperatorResult> {
    const { rows } = await this.query(`SELECT * FROM ${this.s}.pause_job($1, $2, $3, $4, $5, $6, $7)`, [
      i.job,
      i.expectVersion ?? null,
      i.reason ?? null,
      i.until ?? null,
      i.untilMs ?? null,
      i.by,
      i.hostTime,
    ]);
    return { ...operatorRow(rows[0]), pausedUntil: rows[0].paused_until };
  }

  async resume(i: OperatorWrite): Promise<OperatorResult> {
    const { rows } = await this.query(`SELECT * FROM ${this.s}.resume_job($1, $2, $3, $4)`, [
      i.job,
      i.expectVersion ?? null,
      i.by,
      i.hostTime,
    ]);
    return operatorRow(rows[0]);
  }

  async mark(i: MarkInput): Promise<OperatorResult> {
    // durable_commit() in the same statement: the mark survives a crash whatever synchronous_commit says (021).
    const sql = `SELECT m.* FROM ${this.s}.durable_commit() d, ${this.s}.mark_window($1, $2, $3, $4, $5, $6, $7) m`;
    const { rows } = await this.query(sql, [
      i.job,
      i.window,
      i.outcome,
      i.reason ?? null,
      i.expectVersion ?? null,
      i.by,
      i.hostTime,
    ]);
    return {
      ...operatorRow(rows[0]),
      holder: rows[0].holder,
      holderGeneration: rows[0].holder_generation,
      previousOutcome: rows[0].previous_outcome,
    };
  }

  async releaseLease(i: ReleaseInput): Promise<OperatorResult> {
    const { rows } = await this.query(`SELECT * FROM ${this.s}.release_lease($1, $2, $3, $4, $5)`, [
      i.job,
      i.expectVersion ?? null,
      i.force,
      i.by,
      i.hostTime,
    ]);
    const r = rows[0];
    return {
      ...operatorRow(r),
      holder: r.holder,
      holderGeneration: r.holder_generation,
      holderWindow: r.holder_window,
      live: r.live === true,
    };
  }

  async readJobRows(name?: string): Promise<{ dbNow: Date; rows: JobRow[] }> {
    const s = this.s;
    // Instants and spans as float8 milliseconds (date_part, not numeric extract): parsing
    // three timestamps per job was a real share of a large read. The latest completion comes
    // from the job's digest (migration 019), and from the ledger only for a job without one: a
    // probe of windows_last_completed per job cost more as the history grew. Open windows are few, so they
    // are gathered in one pass rather than looked up job by job (measured by `npm run bench`):
    // the newest 10, and the one with the most failed attempts when it is older (for `check`).
    const { rows } = await this.query(
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
    const dbNow = new Date(rows[0]?.db_now_ms ?? (await this.query(`SELECT ${epochMs('now()')} AS ms`, [])).rows[0].ms);
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

  async readScheduleKeys(name?: string): Promise<{ dbNow: Date; keys: ScheduleKey[] }> {
    // The clock comes along even when no job has a schedule (the LEFT JOIN keeps one row).
    const { rows } = await this.query(
      `SELECT ${epochMs('now()')} AS db_now_ms, k.*
         FROM (SELECT 1) one LEFT JOIN (
           SELECT DISTINCT schedule, tz, window_format, window_offset, alert_after_ms, j.alert_lookback_ms FROM ${this.s}.jobs j
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

  async readDueNotCompleted(groups: DueGroup[], name?: string): Promise<DueNotCompleted[]> {
    if (groups.length === 0) return [];
    // Each job's digest (window_digest, migration 019) answers first: a job whose due windows
    // are all among its final ones sends no row and costs no probe of the ledger. Otherwise,
    // when its due windows are all later than the digest's floor (every final window scheduled
    // since is in it, and every marked one unless there were too many), the digest says which
    // are final, and the rows that are not come from windows_open (open windows only, a small
    // index). Only a job without a digest, with a due window at or before its floor, or with
    // marks_full, is read from the ledger as before: one index scan per job
    // (windows_pkey, `window_key = ANY(its key's due windows)`). The history kept then no
    // longer enters a read of healthy jobs (issue 24; docs/performance.md). Which due windows
    // are missing, and the oldest NOT_COMPLETED_LISTED, are worked out here from the key's list
    // (a row per job and due window through the executor cost more than the probes). The keys
    // are few and come from the jobs table, so NULL can stand as '' (never a valid value).
    const d = groups.flatMap((g, i) => g.windows.map((w) => ({ grp: i + 1, ...w })));
    const { rows } = await this.query(
      `WITH g AS (
         SELECT * FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[])
                WITH ORDINALITY AS g(schedule, tz, fmt, off, alert, lookback, grp)),
       k AS (
         SELECT d.grp, array_agg(d.window_key) AS due, min(d.at_ms) AS oldest_ms,
                array_agg(d.window_key) || coalesce(array_agg(d.legacy_key) FILTER (WHERE d.legacy_key IS NOT NULL), '{}') AS probe
           FROM unnest($1::int[], $2::text[], $9::text[], $11::float8[]) AS d(grp, window_key, legacy_key, at_ms) GROUP BY d.grp),
       jg AS MATERIALIZED (
         SELECT j.name, ${epochMs('j.created_at')} AS created_ms, ${epochMs('j.schedule_since')} AS since_ms,
                (SELECT ${epochMs('t.retained_from')} FROM ${this.s}.retention t WHERE t.job = j.name) AS retained_ms,
                g.grp FROM ${this.s}.jobs j JOIN g ON j.schedule = g.schedule
            AND coalesce(j.tz, '') = coalesce(g.tz, '') AND coalesce(j.window_format, '') = coalesce(g.fmt, '')
            AND coalesce(j.window_offset, '') = coalesce(g.off, '') AND coalesce(j.alert_after_ms, -1) = coalesce(g.alert, -1)
            AND coalesce(j.alert_lookback_ms, -1) = coalesce(g.lookback, -1)
          WHERE j.window_mode = 'schedule' AND ($10::text IS NULL OR j.name = $10))
       SELECT jg.name AS job, jg.grp, jg.created_ms, jg.since_ms, jg.retained_ms,
              CASE WHEN f.probed THEN f.final ELSE ARRAY(SELECT x FROM unnest(k.probe) x WHERE dg.finals ? x OR dg.marks ? x) END AS final,
              coalesce(f.open_keys, o.open_keys) AS open_keys, coalesce(f.open_outcomes, o.open_outcomes) AS open_outcomes,
              coalesce(f.open_generations, o.open_generations) AS open_generations
         FROM jg JOIN k ON k.grp = jg.grp
         LEFT JOIN ${this.s}.window_digest dg ON dg.job = jg.name
         CROSS JOIN LATERAL (
           SELECT dg.job IS NULL OR dg.floor_ms >= k.oldest_ms OR dg.marks_full AS probed,
                  count(*) FILTER (WHERE w.completed_at IS NOT NULL AND w.window_key = ANY(k.due)) AS due_final,
                  array_agg(w.window_key) FILTER (WHERE w.completed_at IS NOT NULL) AS final,
                  array_agg(w.window_key) FILTER (WHERE w.completed_at IS NULL AND w.window_key = ANY(k.due)) AS open_keys,
                  array_agg(${budgetOutcome('w')}) FILTER (WHERE w.completed_at IS NULL AND w.window_key = ANY(k.due)) AS open_outcomes,
                  array_agg(w.generation::text) FILTER (WHERE w.completed_at IS NULL AND w.window_key = ANY(k.due)) AS open_generations
             FROM ${this.s}.windows w
            WHERE (dg.job IS NULL OR dg.floor_ms >= k.oldest_ms OR dg.marks_full) AND w.job = jg.name AND w.window_key = ANY(k.probe)) f
         CROSS JOIN LATERAL (
           SELECT array_agg(w.window_key) AS open_keys, array_agg(${budgetOutcome('w')}) AS open_outcomes,
                  array_agg(w.generation::text) AS open_generations
             FROM ${this.s}.windows w
            WHERE dg.job IS NOT NULL AND dg.floor_ms < k.oldest_ms AND NOT dg.marks_full
              AND w.job = jg.name AND w.completed_at IS NULL AND w.window_key = ANY(k.due)) o
        WHERE NOT coalesce(dg.finals ?& k.due, false)
          AND (NOT f.probed OR f.due_final < cardinality(k.due))`,
      [
        d.map((x) => x.grp),
        d.map((x) => x.window),
        groups.map((g) => g.schedule),
        groups.map((g) => g.tz),
        groups.map((g) => g.windowFormat),
        groups.map((g) => g.windowOffset),
        groups.map((g) => g.alertAfterMs),
        groups.map((g) => g.alertLookbackMs),
        d.map((x) => x.legacy ?? null),
        name ?? null,
        d.map((x) => x.scheduledAt.getTime()),
      ],
    );
    const out: DueNotCompleted[] = [];
    for (const r of rows) {
      const g = groups[(r.grp as number) - 1]!;
      const final = new Set<string>(r.final ?? []);
      const open = new Map<string, { outcome: string; generation: string }>();
      const keys = (r.open_keys ?? []) as string[];
      for (let i = 0; i < keys.length; i++)
        open.set(keys[i]!, { outcome: r.open_outcomes[i], generation: r.open_generations[i] });
      const mine: DueNotCompleted[] = [];
      let count = 0;
      // As before in SQL, and as the embedded store: a due window is not final when it has no
      // final row (nor its legacy spelling); one without a row is expected only of a job
      // registered by then, and not before its retention horizon (pruned: expectedFrom); the
      // oldest few are listed, and the key's latest window.
      g.windows.forEach((w, i) => {
        if (final.has(w.window) || (w.legacy !== undefined && final.has(w.legacy))) return;
        const row = open.get(w.window);
        if (row === undefined && expectedFrom(r.created_ms, r.retained_ms, r.since_ms) > w.scheduledAt.getTime())
          return;
        count++;
        if (count <= NOT_COMPLETED_LISTED || i === g.windows.length - 1)
          mine.push({
            job: r.job,
            count: 0,
            window: w.window,
            outcome: row?.outcome ?? null,
            generation: row?.generation ?? null,
          });
      });
      for (const m of mine) m.count = count;
      for (const m of mine) out.push(m);
    }
    return out;
  }

  async readHistory(job: string, limit: number, window?: string): Promise<HistoryEvent[]> {
    const { rows } = await this.query(
      `SELECT * FROM (
         SELECT seq, kind, window_key, owner, host, generation, db_time, host_time, detail
           FROM ${this.s}.events WHERE job = $1 AND ($3::text IS NULL OR window_key = $3) ORDER BY seq DESC LIMIT $2) e
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

  async readJobWindows(job: string, limit: number): Promise<WindowRow[]> {
    const cols =
      'window_key, scheduled_at, outcome, attempts, generation, owner, first_started_at, started_at, finished_at, completed_at, ' +
      // From the row as JSON: a schema before 024 has no such column, and the page still reads.
      `exit_code, ${reportedBudget("(to_jsonb(w) ->> 'max_attempts')::int", '')} AS max_attempts`;
    const { rows } = await this.query(
      `(SELECT ${cols} FROM ${this.s}.windows w WHERE job = $1 AND completed_at IS NULL ORDER BY started_at DESC LIMIT $2)
       UNION ALL
       (SELECT ${cols} FROM ${this.s}.windows w WHERE job = $1 AND completed_at IS NOT NULL ORDER BY completed_at DESC,
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

  /** Whether windows.claimed_as exists (026): asked until it is found, then known. */
  private claimedAsColumn = false;

  /** windows.claimed_as, or NULL on a schema before 026 (to_jsonb(w) costs most of a 100,000-window read). */
  private async claimedAsSql(): Promise<string> {
    if (!this.claimedAsColumn) {
      const { rows } = await this.query(
        `SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'claimed_as' AND NOT attisdropped`,
        [`${this.s}.windows`],
      );
      this.claimedAsColumn = rows.length > 0;
    }
    return this.claimedAsColumn ? 'w.claimed_as' : 'NULL::text';
  }

  /**
   * The reason of the window `w` (aliased so) as monitor/occurrences.ts judges one occurrence;
   * events are read only for the rare windows that need them (missed, handled by hand), through
   * their kind's index. A schema before 024 has no max_attempts: read from the row as JSON
   * (failed windows only).
   */
  private async occurrenceReasonSql(): Promise<string> {
    const e = `${this.s}.events e WHERE e.job = w.job AND e.window_key = w.window_key`;
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
         ELSE CASE ${await this.claimedAsSql()} WHEN 'backfill' THEN 'backfilled' WHEN 'catch-up' THEN 'caught-up'
           ELSE 'completed' END END`;
  }

  async readOccurrenceCounts(job?: string): Promise<OccurrenceCount[]> {
    const since = "now() - coalesce(j.alert_lookback_ms, 86400000) * interval '1 millisecond'";
    const windows = `SELECT w.job, ${await this.occurrenceReasonSql()} AS reason
       FROM ${this.s}.windows w JOIN ${this.s}.jobs j ON j.name = w.job
       WHERE coalesce(w.scheduled_at, w.first_started_at) >= ${since} AND ($1::text IS NULL OR w.job = $1)`;
    // Occurrences only skipped (no ledger row), by their latest skip: the skip kinds' events
    // within the longest lookback from the index on (kind, db_time), those with a row left out
    // first; then the job's own lookback, which the latest skip is within if any is.
    const skipped = `SELECT s.job, s.reason FROM (
         SELECT DISTINCT ON (e.job, e.window_key) e.job, e.db_time, ${skipReasonSql('e.kind')} AS reason
         FROM ${this.s}.events e
         WHERE e.kind IN (${SKIP_KINDS_SQL}) AND e.window_key IS NOT NULL AND ($1::text IS NULL OR e.job = $1)
           AND e.db_time >= now() - (SELECT max(coalesce(alert_lookback_ms, 86400000)) FROM ${this.s}.jobs)
             * interval '1 millisecond'
           AND NOT EXISTS (SELECT 1 FROM ${this.s}.windows w WHERE w.job = e.job AND w.window_key = e.window_key)
         ORDER BY e.job, e.window_key, e.seq DESC) s
       JOIN ${this.s}.jobs j ON j.name = s.job WHERE s.db_time >= ${since}`;
    const { rows } = await this.query(
      `SELECT job, reason, count(*)::int AS n FROM (${windows} UNION ALL ${skipped}) o GROUP BY 1, 2`,
      [job ?? null],
    );
    return rows.map((r) => ({ job: r.job, reason: r.reason, n: r.n }));
  }

  async readOccurrencesBetween(
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
    const { rows } = await this.query(
      `SELECT j.name AS job, w.window_key, ${epochMs('coalesce(w.scheduled_at, w.first_started_at)')} AS at_ms,
              w.attempts, ${reportedBudget("(to_jsonb(w) ->> 'max_attempts')::int", '')} AS max_attempts,
              w.generation::text AS generation, ${await this.occurrenceReasonSql()} AS reason, NULL::text AS scheduled_text
         FROM unnest($1::text[]) j(name)
         CROSS JOIN LATERAL (
           (SELECT * FROM ${this.s}.windows w WHERE w.job = j.name AND w.scheduled_at >= $2 AND w.scheduled_at < $3
             ORDER BY w.scheduled_at DESC LIMIT $4)
           UNION ALL
           (SELECT * FROM ${this.s}.windows w WHERE w.job = j.name AND w.scheduled_at IS NULL
              AND w.first_started_at >= $2 AND w.first_started_at < $3 ORDER BY w.first_started_at DESC LIMIT $4)) w
       UNION ALL
       SELECT * FROM (
         SELECT DISTINCT ON (e.job, e.window_key) e.job, e.window_key, ${epochMs('e.db_time')}, 0, NULL::int, NULL::text,
                ${skipReasonSql('e.kind')}, e.detail ->> 'scheduled_at'
           FROM ${this.s}.events e
          WHERE e.kind IN (${SKIP_KINDS_SQL}) AND e.db_time >= $2::timestamptz - interval '1 hour' AND e.db_time < $3
            AND e.job = ANY($1::text[]) AND e.window_key IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM ${this.s}.windows w WHERE w.job = e.job AND w.window_key = e.window_key)
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

  async readEventCounts(kinds: readonly string[]): Promise<EventCount[]> {
    const { rows } = await this.query(
      `SELECT job, kind, host, n FROM ${this.s}.event_counts WHERE kind = ANY($1::text[])`,
      [kinds],
    );
    return rows.map((r) => ({ job: r.job, kind: r.kind, host: r.host, n: Number(r.n) }));
  }

  async readHostClocks(): Promise<HostClock[]> {
    const { rows } = await this.query(`SELECT host, offset_ms, uncertainty_ms FROM ${this.s}.hosts`, []);
    return rows.map((r) => ({ host: r.host, offsetMs: r.offset_ms, uncertaintyMs: r.uncertainty_ms }));
  }

  /**
   * The newest migration applied to the schema; undefined when it cannot be read (a role
   * granted by hand without SELECT on the migrations table): only a warning depends on it.
   */
  async readSchemaVersion(): Promise<number | undefined> {
    try {
      const { rows } = await this.query(`SELECT max(version) AS v FROM ${this.s}.migrations`, []);
      const v = rows[0]?.v as number | null | undefined;
      return v == null ? undefined : Number(v);
    } catch {
      return undefined;
    }
  }

  /** See LeaseStore.readReplication: each part read on its own, so what is refused leaves the rest. */
  async readReplication(): Promise<ReplicationReport> {
    const x: ReplicationReadings = { errors: {} };
    const why = (err: unknown): string =>
      `${(err as Error).message}${(err as { code?: string }).code ? ` (SQLSTATE ${(err as { code?: string }).code})` : ''}`;
    try {
      const { rows } = await this.query(
        `SELECT current_user AS role, pg_is_in_recovery() AS recovery,
                current_setting('synchronous_standby_names') AS names, current_setting('synchronous_commit') AS commit`,
        [],
      );
      x.role = rows[0].role;
      x.inRecovery = rows[0].recovery;
      x.synchronousStandbyNames = rows[0].names;
      x.synchronousCommit = rows[0].commit;
    } catch (err) {
      x.errors.settings = why(err);
    }
    try {
      // A role without pg_read_all_stats sees one row per standby, its details NULL.
      const { rows } = await this.query(
        `SELECT count(*)::int AS n, count(*) FILTER (WHERE sync_state IN ('sync', 'quorum'))::int AS sync,
                count(*) FILTER (WHERE state IS NULL)::int AS hidden
           FROM pg_stat_replication`,
        [],
      );
      x.senders = { n: rows[0].n, sync: rows[0].sync, hidden: rows[0].hidden };
    } catch (err) {
      x.errors.senders = why(err);
    }
    try {
      const { rows } = await this.query(`SELECT epoch, server_timeline FROM ${this.s}.fence_status()`, []);
      if (rows[0])
        x.fence = {
          epoch: Number(rows[0].epoch),
          timeline: rows[0].server_timeline === null ? null : Number(rows[0].server_timeline),
        };
    } catch (err) {
      // 42883: the schema predates migration 011.
      x.errors.fence =
        (err as { code?: string }).code === '42883'
          ? 'the schema predates migration 011 (tokens do not yet follow a failover): run `leasejob migrate`'
          : why(err);
    }
    // Loaded here: `run` never asks.
    const { judgeReplication } = await import('../../replication.js');
    return judgeReplication(x);
  }

  async ping(): Promise<void> {
    await this.query('SELECT 1', []);
  }

  /** Set by close(): a statement rolled back is not sent again. */
  private closing = false;

  /** Bounded: a query stuck on a black-holed connection must not hold the process at exit. */
  async close(limitMs = CLOSE_LIMIT_MS): Promise<void> {
    this.closing = true;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.pool.end().catch(() => {}),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, limitMs);
      }),
    ]);
    clearTimeout(timer);
  }
}

/** A function of the schema missing (42883): the schema predates the migration that added it. */
function isUndefinedFunction(err: unknown, name: string): boolean {
  const e = err as { code?: string; message?: string };
  return e.code === '42883' && (e.message ?? '').includes(name);
}
