// The PostgreSQL store: one parameterized statement per runner step (acquire+claim, renew,
// finish+release, record an event), each a call to a function created by sql/, and the
// set-based reads behind status, check and the exporter. This class is the facade and the
// connection (each statement bounded, sent again when rolled back); each concern lives in its own
// file named after the function of sql/functions/ it mirrors, as the embedded store's do.
import pg from 'pg';
import { monoNow, sleep } from '../../clock.js';
import { isTransientDbError, noAnswerWithin, wasRolledBack } from './db-errors.js';
import { quoteIdent } from '../../names.js';
import { PgRetention } from './retention.js';
import type { ReplicationReport } from '../../replication.js';
import type {
  AcquireInput,
  AcquireRow,
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
import type { Notice, Pg } from './context.js';
import { acquire } from './acquire.js';
import { claimWindow } from './claim-window.js';
import { abandon, finish } from './finish.js';
import { finishWindow } from './finish-window.js';
import { mark } from './mark-window.js';
import { pause, resume } from './pause-job.js';
import { readDueNotCompleted } from './read-due.js';
import {
  readEventCounts,
  readHistory,
  readJobWindows,
  readOccurrenceCounts,
  readOccurrencesBetween,
  readWindows,
} from './read-history.js';
import { readJobRows, readScheduleKeys } from './read-jobs.js';
import { readReplication } from './read-replication.js';
import { recordEvent } from './record-event.js';
import { recordMissed } from './record-missed.js';
import { readOutputs, recordOutput } from './record-output.js';
import { release, releaseLease } from './release-lease.js';
import { adopt, renew } from './renew.js';
import { requestReplace } from './request-replace.js';

export { createPool, type PoolOptions } from './pool.js';

/**
 * How long a read (status, history, check, the exporter) or an administrative statement waits
 * for its answer. A connection can go silent without a reset (a NAT or firewall forgetting it):
 * nothing would ever end the wait. A timed-out connection is dropped; the next one is new.
 */
export const READ_TIMEOUT_MS = 10_000;

/**
 * Marks an error from before a statement was sent (no connection: refused, timed out, too many
 * connections): whatever it was for cannot have happened. The runner reads `statementSent`.
 */
function notSent(err: unknown): unknown {
  if (typeof err === 'object' && err !== null && Object.isExtensible(err)) Object.assign(err, { statementSent: false });
  return err;
}

/** How often a statement the server rolled back (40001, 40P01) is sent in all, at most. */
const ROLLBACK_TRIES = 8;
/** The longest random pause before sending it again. */
const ROLLBACK_PAUSE_MAX_MS = 250;
/** Sent again only with at least this much of its time limit left after the pause. */
const ROLLBACK_MIN_LEFT_MS = 250;

/** How long closing the pool may take before the process exits regardless. */
const CLOSE_LIMIT_MS = 2_000;

export class PgStore implements LeaseStore {
  readonly kind = 'postgresql' as const;
  readonly location: string;

  private readonly s: string;
  readonly retention: PgRetention;
  /** What each concern's functions take: the schema, the bound on reads, this query(). */
  private readonly db: Pg;

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
    this.db = {
      s: this.s,
      readTimeoutMs,
      found: { beforeTwoClocks: false, noReplaceRequests: false, claimedAsColumn: false },
      query: (text, values, timeoutMs, notices) => this.query(text, values, timeoutMs, notices),
    };
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
    return acquire(this.db, i);
  }

  renew(
    job: string,
    owner: string,
    generation: string,
    ttlMs: number,
    lockTimeoutMs: number,
    answerTimeoutMs: number,
    offset?: { offsetMs: number; uncertaintyMs: number },
  ): Promise<RenewRow | undefined> {
    return renew(this.db, job, owner, generation, ttlMs, lockTimeoutMs, answerTimeoutMs, offset);
  }

  requestReplace(i: ReplaceRequest): Promise<ReplaceAnswer> {
    return requestReplace(this.db, i);
  }

  adopt(i: AdoptInput): Promise<{ attempt: number; dbNow: Date; expiresAt: Date } | undefined> {
    return adopt(this.db, i);
  }

  abandon(job: string, owner: string, hostTime: Date, answerTimeoutMs: number): Promise<string | undefined> {
    return abandon(this.db, job, owner, hostTime, answerTimeoutMs);
  }

  finish(i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
    return finish(this.db, i);
  }

  claimWindow(i: ClaimWindowInput): Promise<ClaimWindowRow> {
    return claimWindow(this.db, i);
  }

  finishWindow(i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
    return finishWindow(this.db, i);
  }

  recordMissed(i: RecordMissedInput): Promise<number | undefined> {
    return recordMissed(this.db, i);
  }

  readWindows(job: string, keys: readonly string[]): Promise<WindowStates> {
    return readWindows(this.db, job, keys);
  }

  recordEvent(e: RecordEventInput): Promise<string> {
    return recordEvent(this.db, e);
  }

  recordOutput(i: RecordOutputInput): Promise<boolean> {
    return recordOutput(this.db, i);
  }

  readOutputs(job: string, limit: number): Promise<WindowOutput[]> {
    return readOutputs(this.db, job, limit);
  }

  release(job: string, hostTime: Date): Promise<{ owner: string; generation: string } | undefined> {
    return release(this.db, job, hostTime);
  }

  pause(i: PauseInput): Promise<OperatorResult> {
    return pause(this.db, i);
  }

  resume(i: OperatorWrite): Promise<OperatorResult> {
    return resume(this.db, i);
  }

  mark(i: MarkInput): Promise<OperatorResult> {
    return mark(this.db, i);
  }

  releaseLease(i: ReleaseInput): Promise<OperatorResult> {
    return releaseLease(this.db, i);
  }

  readJobRows(name?: string): Promise<{ dbNow: Date; rows: JobRow[] }> {
    return readJobRows(this.db, name);
  }

  readScheduleKeys(name?: string): Promise<{ dbNow: Date; keys: ScheduleKey[] }> {
    return readScheduleKeys(this.db, name);
  }

  readDueNotCompleted(groups: DueGroup[], name?: string): Promise<DueNotCompleted[]> {
    return readDueNotCompleted(this.db, groups, name);
  }

  readHistory(job: string, limit: number, window?: string): Promise<HistoryEvent[]> {
    return readHistory(this.db, job, limit, window);
  }

  readJobWindows(job: string, limit: number): Promise<WindowRow[]> {
    return readJobWindows(this.db, job, limit);
  }

  readOccurrenceCounts(job?: string): Promise<OccurrenceCount[]> {
    return readOccurrenceCounts(this.db, job);
  }

  readOccurrencesBetween(jobs: readonly string[], from: Date, to: Date, perJob: number): Promise<RangeOccurrence[]> {
    return readOccurrencesBetween(this.db, jobs, from, to, perJob);
  }

  readEventCounts(kinds: readonly string[]): Promise<EventCount[]> {
    return readEventCounts(this.db, kinds);
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
  readReplication(): Promise<ReplicationReport> {
    return readReplication(this.db);
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
