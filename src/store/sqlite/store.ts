// The embedded store for one host: SQLite (better-sqlite3) in WAL mode, shared by every
// process on the host through immediate transactions. Lease expiry is on the monotonic clock
// plus the boot id, so no wall-clock step can expire or extend a lease, and a reboot expires
// every lease. Same semantics as the PostgreSQL functions in sql/: this class is the facade, each
// concern lives in its own file named after the function of sql/functions/ it mirrors.
import type BetterSqlite3 from 'better-sqlite3';
import { hostName } from '../../host-name.js';
import type { ReplicationReport } from '../../replication.js';
import { migrateSqlite } from './schema.js';
import { SqliteRetention } from './retention.js';
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
  RangeOccurrence,
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
} from '../contract.js';
import { isNetworkError } from '../contract.js';
import { bootId, type Sqlite } from './context.js';
import { openStateFile } from './open.js';
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
import { recordEvent } from './record-event.js';
import { recordMissed } from './record-missed.js';
import { readOutputs, recordOutput } from './record-output.js';
import { release, releaseLease } from './release-lease.js';
import { adopt, renew } from './renew.js';
import { requestReplace } from './request-replace.js';

export { JOB_ROWS_SQL } from './read-jobs.js';
export { bootId, hostMonotonicMs } from './context.js';

export class SqliteStore implements LeaseStore {
  readonly kind = 'sqlite' as const;
  readonly retention: SqliteRetention;
  /** What each concern's functions take: the file, this boot and this host. */
  private readonly s: Sqlite;

  private constructor(
    private readonly db: BetterSqlite3.Database,
    readonly location: string,
  ) {
    this.retention = new SqliteRetention(db);
    this.s = { db, boot: bootId(), host: hostName(), file: location };
  }

  /**
   * A SQLite error is never worth a retry (a busy file is waited for inside the driver); only a
   * bound of leasejob's own that ran out is (ETIMEDOUT: an answer given up after a signal).
   */
  isTransient(err: unknown): boolean {
    return isNetworkError(err);
  }

  static open(file: string, opts: { create?: boolean } = {}): SqliteStore {
    const db = openStateFile(file, opts);
    const store = new SqliteStore(db, file);
    migrateSqlite(db);
    return store;
  }

  acquire(i: AcquireInput): Promise<AcquireRow> {
    return acquire(this.s, i);
  }

  pause(i: PauseInput): Promise<OperatorResult> {
    return pause(this.s, i);
  }

  resume(i: OperatorWrite): Promise<OperatorResult> {
    return resume(this.s, i);
  }

  mark(i: MarkInput): Promise<OperatorResult> {
    return mark(this.s, i);
  }

  releaseLease(i: ReleaseInput): Promise<OperatorResult> {
    return releaseLease(this.s, i);
  }

  renew(job: string, owner: string, generation: string, ttlMs: number): Promise<RenewRow | undefined> {
    return renew(this.s, job, owner, generation, ttlMs);
  }

  requestReplace(i: ReplaceRequest): Promise<ReplaceAnswer> {
    return requestReplace(this.s, i);
  }

  adopt(i: AdoptInput): Promise<{ attempt: number; dbNow: Date; expiresAt: Date } | undefined> {
    return adopt(this.s, i);
  }

  abandon(job: string, owner: string, hostTime: Date): Promise<string | undefined> {
    return abandon(this.s, job, owner, hostTime);
  }

  finish(i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
    return finish(this.s, i);
  }

  claimWindow(i: ClaimWindowInput): Promise<ClaimWindowRow> {
    return claimWindow(this.s, i);
  }

  finishWindow(i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
    return finishWindow(this.s, i);
  }

  recordMissed(i: RecordMissedInput): Promise<number | undefined> {
    return recordMissed(this.s, i);
  }

  readWindows(job: string, keys: readonly string[]): Promise<WindowStates> {
    return readWindows(this.s, job, keys);
  }

  recordEvent(e: RecordEventInput): Promise<string> {
    return recordEvent(this.s, e);
  }

  recordOutput(i: RecordOutputInput): Promise<boolean> {
    return recordOutput(this.s, i);
  }

  readOutputs(job: string, limit: number): Promise<WindowOutput[]> {
    return readOutputs(this.s, job, limit);
  }

  release(job: string, hostTime: Date): Promise<{ owner: string; generation: string } | undefined> {
    return release(this.s, job, hostTime);
  }

  readJobRows(name?: string): Promise<{ dbNow: Date; rows: JobRow[] }> {
    return readJobRows(this.s, name);
  }

  readScheduleKeys(name?: string): Promise<{ dbNow: Date; keys: ScheduleKey[] }> {
    return readScheduleKeys(this.s, name);
  }

  readDueNotCompleted(groups: DueGroup[], name?: string): Promise<DueNotCompleted[]> {
    return readDueNotCompleted(this.s, groups, name);
  }

  readHistory(job: string, limit: number, window?: string): Promise<HistoryEvent[]> {
    return readHistory(this.s, job, limit, window);
  }

  readJobWindows(job: string, limit: number): Promise<WindowRow[]> {
    return readJobWindows(this.s, job, limit);
  }

  readOccurrencesBetween(jobs: readonly string[], from: Date, to: Date, perJob: number): Promise<RangeOccurrence[]> {
    return readOccurrencesBetween(this.s, jobs, from, to, perJob);
  }

  readOccurrenceCounts(job?: string): Promise<OccurrenceCount[]> {
    return readOccurrenceCounts(this.s, job);
  }

  readEventCounts(kinds: readonly string[]): Promise<EventCount[]> {
    return readEventCounts(this.s, kinds);
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
