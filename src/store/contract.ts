// The store contract: what the runner, status, check and the exporter need from wherever the
// leases live (PostgreSQL for several hosts, SQLite for one). Both implementations keep the same
// semantics: generation never restarts, completed windows are final, events are gap-free.
import type { ReplicationReport } from '../replication.js';

/**
 * `paused`: the job is paused (leasejob pause); its occurrence was recorded as skipped, no lease taken.
 * `exhausted`, `backoff`: the attempt budget (see AttemptBudget) refused the window, no lease kept.
 * `unconfirmed`: the lease expired on the database clock, but this caller's clock offset does not
 * agree with the holder's (a stepped clock?): taken only once watched unchanged for a full TTL
 * (AcquireInput.observed; docs/fencing.md "Which clock decides what"). PostgreSQL only.
 */
export type AcquireOutcome =
  'acquired' | 'busy' | 'stale' | 'unconfirmed' | 'done' | 'missed' | 'paused' | BudgetRefusal;

/** What the two-clock takeover answers about the lease and the clocks (PostgreSQL from 035). */
export interface TwoClockReading {
  /** The holder's renewal counter (for holderGeneration), what a contender watches. */
  renewals: string | null;
  holderTtlMs: number | null;
  /** The holder's clock offset at its last renewal (database minus host, ms) and its uncertainty. */
  holderOffsetMs: number | null;
  holderUncertaintyMs: number | null;
  /** This caller's offset as the statement saw it (an upper bound). */
  offsetMs: number | null;
}

/** Why the attempt budget refused a window: its attempts are spent, or its last failure is too recent. */
export type BudgetRefusal = 'exhausted' | 'backoff';

/**
 * An occurrence's attempt budget (run --max-attempts, --retry-delay), judged in the claiming
 * transaction: a window whose attempts reached maxAttempts is exhausted; one whose last attempt
 * failed less than backoffMs(retryDelayMs, attempts) ago is in backoff. Unset: no limit.
 */
export interface AttemptBudget {
  maxAttempts?: number | undefined;
  retryDelayMs?: number | undefined;
}

export interface AcquireInput extends AttemptBudget {
  job: string;
  owner: string;
  ttlMs: number;
  renewIntervalMs: number;
  window?: string | undefined;
  scheduledAt?: Date | undefined;
  rerun: boolean;
  maxDelayMs?: number | undefined;
  hostTime: Date;
  spec?: Record<string, string | number | null> | undefined;
  /** How long to wait for the answer: one later than the stop point could not be used. */
  answerTimeoutMs?: number | undefined;
  /**
   * The lease as this caller watched it, unchanged (generation and renewal counter) for a full
   * TTL of the holder on its own monotonic clock: vouches that the holder has stopped when the
   * clocks disagree (`unconfirmed`).
   */
  observed?: { generation: string; renewals: string } | undefined;
  /**
   * Record the skip an answer means in the acquiring statement (one round trip, not two): a
   * `done-skip` for `done`, and with `busy` (--on-busy skip) a `busy-skip` for `busy`, with the
   * occurrence's `scheduledAt` as the run would write it. The answer then says skipRecorded.
   */
  recordSkips?: { busy: boolean } | undefined;
}

export interface AcquireRow {
  outcome: AcquireOutcome;
  generation: string | null;
  /** The attempt claimed; for exhausted and backoff, the attempts made. */
  attempt: number | null;
  dbNow: Date | null;
  holder: string | null;
  holderGeneration: string | null;
  holderWindow: string | null;
  /** The holder's expiry; for backoff, when the window may run again. */
  expiresAt: Date | null;
  completedAt: Date | null;
  /**
   * With outcome `stale`: the holder's database session (PostgreSQL) or its process on this boot
   * (the embedded store) is gone, a crash, rather than renewals merely overdue. Its lease is
   * waited out all the same: taking it before expiry is not safe (docs/fencing.md).
   */
  holderGone?: boolean | undefined;
  /**
   * Set when this run's settings differed from a registered schedule's: the registry now holds
   * `new` (adopted, version bumped) and a `job-changed` event says so. The runner warns.
   */
  jobChanged?: JobChange | undefined;
  /** The two-clock takeover's reading (PostgreSQL from 035). */
  clocks?: TwoClockReading | undefined;
  /** The skip this answer means was recorded with it (AcquireInput.recordSkips). */
  skipRecorded?: boolean | undefined;
}

/** Registry settings as a run sends them (`spec`) and the registry holds them. */
export type JobSettings = Record<string, string | number | null>;

export interface JobChange {
  old: JobSettings;
  new: JobSettings;
  version: number;
}

export interface RenewRow {
  dbNow: Date;
  expiresAt: Date;
  /**
   * Set when the lease was not renewed (no longer this generation's) and the store still read
   * its clock (PostgreSQL from 035): dbNow is then that reading, expiresAt meaningless.
   */
  notRenewed?: true | undefined;
  /** The window of a later occurrence that asked this holder to stop (requestReplace), if any. */
  replaceFor?: string | null | undefined;
}

/** `run --on-busy replace` asking the lease's live holder to stop (LeaseStore.requestReplace). */
export interface ReplaceRequest {
  job: string;
  window: string;
  scheduledAt: Date;
  requester: string;
  hostTime: Date;
}

/**
 * requested: the holder runs an earlier occurrence and is asked to stop; same-window: it runs
 * this one (never replaced); not-earlier: its window is not scheduled earlier (or it has none);
 * free: no live holder (acquire again).
 */
export interface ReplaceAnswer {
  outcome: 'requested' | 'same-window' | 'not-earlier' | 'free';
  holder: string | null;
  holderGeneration: string | null;
  holderWindow: string | null;
}

/** Taking up a lease whose acquire committed but whose answer never came (see LeaseStore.adopt). */
export interface AdoptInput {
  job: string;
  owner: string;
  generation: string;
  window?: string | undefined;
  ttlMs: number;
  lockTimeoutMs: number;
  answerTimeoutMs: number;
}

/** `replaced`: stopped for a later occurrence (run --on-busy replace); the window stays open. */
export type FinishOutcome = 'completed' | 'failed' | 'replaced' | 'none';

export interface FinishInput {
  job: string;
  owner: string;
  generation: string;
  window?: string | undefined;
  outcome: FinishOutcome;
  exitCode?: number | undefined;
  hostTime: Date;
  detail?: Record<string, unknown>;
  /** How long to wait for the answer (the store's default for reads when unset). */
  answerTimeoutMs?: number;
}

/** Claiming one more window under a lease already held (catch-up, backfill: see LeaseStore.claimWindow). */
export interface ClaimWindowInput extends AttemptBudget {
  job: string;
  owner: string;
  generation: string;
  window: string;
  scheduledAt?: Date | undefined;
  rerun: boolean;
  maxDelayMs?: number | undefined;
  hostTime: Date;
  /** Added to the window-claimed event (e.g. what the claim is part of). */
  detail?: Record<string, unknown>;
  answerTimeoutMs?: number | undefined;
}

/**
 * claimed: run it; done: completed, skipped or marked already; missed: older than the max delay
 * or the retention horizon, recorded so; paused: the job was paused (not run, left open); not-held:
 * the lease is gone, or its token is of an earlier history; exhausted, backoff: refused by the
 * attempt budget (recorded).
 */
export interface ClaimWindowRow {
  outcome: 'claimed' | 'done' | 'missed' | 'paused' | 'not-held' | BudgetRefusal;
  /** The attempt claimed; for exhausted and backoff, the attempts made. */
  attempt: number | null;
  completedAt: Date | null;
  /** For backoff: when the window may run again. */
  nextAt?: Date | null | undefined;
  dbNow: Date;
}

/** Occurrences that will not be run, recorded as missed under the lease held (see LeaseStore.recordMissed). */
export interface RecordMissedInput {
  job: string;
  owner: string;
  generation: string;
  windows: Array<{ key: string; scheduledAt?: Date | undefined }>;
  /** Why (the events' detail): `catch-up-limit`, `max-delay`. */
  reason: string;
  hostTime: Date;
  answerTimeoutMs?: number | undefined;
}

/** What the ledger holds for some windows of a job, and when the job was first registered. */
export interface WindowStates {
  dbNow: Date;
  /**
   * Undefined when the job was never registered; else from when its current schedule is expected:
   * its registration, or the schedule change since (jobs.schedule_since), whichever is later.
   */
  registeredAt: Date | undefined;
  /**
   * The job's retention horizon (`prune`): a window scheduled before it may have been pruned, so
   * "no row" does not mean "never ran"; the store refuses to run it. Null when never pruned.
   */
  retainedFrom: Date | null;
  windows: Map<string, { outcome: string; completedAt: Date | null; attempts: number }>;
}

export interface RecordEventInput {
  job: string;
  kind: string;
  window?: string | undefined;
  owner?: string | undefined;
  generation?: string | undefined;
  hostTime: Date;
  detail?: Record<string, unknown>;
  /** How long to wait for the answer (the store's default for events when unset). */
  answerTimeoutMs?: number | undefined;
}

/** One registered job as stored, before the due-window judgement (monitor/job-states.ts). */
export interface JobRow {
  name: string;
  schedule: string | null;
  tz: string | null;
  windowMode: string | null;
  windowFormat: string | null;
  windowOffset: string | null;
  alertAfterMs: number | null;
  /** `run --alert-lookback` (null: the default). */
  alertLookbackMs: number | null;
  /** `run --expect-duration <min>..<max>`: the bounds a run is expected within (null: none). */
  expectMinMs: number | null;
  expectMaxMs: number | null;
  createdAt: Date;
  /**
   * When the job's current schedule took effect (a change of schedule, zone or window settings
   * adopted by the registry; null: never changed since it was registered). An occurrence of the
   * schedule before it that no run claimed was never due (docs/occurrence.md).
   */
  scheduleSince: Date | null;
  owner: string | null;
  generation: string | null;
  held: boolean;
  /**
   * Held, but its holder's database session (PostgreSQL) or process on this boot (the embedded
   * store) is gone: a crashed holder, whose lease still runs until it expires (expiresInMs).
   */
  holderGone?: boolean | undefined;
  expiresInMs: number | null;
  heldForMs: number | null;
  lastWindow: string | null;
  lastCompletedAt: Date | null;
  /** The latest completion's run time; null when it ran nothing (marked or skipped by hand). */
  lastDurationMs: number | null;
  /**
   * The newest 10, oldest first, and before them the one with the most failed attempts when it is
   * older (so that `check` sees a window that keeps failing behind newer ones). `outcome` as
   * recorded, except that monitor/job-states.ts reads a `running` window whose generation no longer holds
   * the lease as `abandoned`.
   */
  openWindows: Array<{
    window: string;
    attempts: number;
    /** As recorded, or `exhausted`: failed or lost with its attempts at the budget (maxAttempts). */
    outcome: string;
    generation: number;
    /** The attempt budget it was claimed or refused under (run --max-attempts); null: none. */
    maxAttempts?: number | null;
  }>;
  /** Every open window of the job, listed or not. */
  openCount: number;
  /** The job record's version: bumped by every registry change, pause, resume, mark and administrative release. */
  version: number;
  /** Paused now, on the store's clock (a pause whose `until` has passed is over). */
  paused: boolean;
  /** The latest pause, current or over ([since, until); until null: until resumed). */
  pause: { since: Date; until: Date | null; reason: string | null; by: string | null } | null;
  /** job-changed events within the last JOB_CHANGES_WINDOW_MS: hosts disagreeing on the settings. */
  recentJobChanges: number;
}

/**
 * The reason of an occurrence skipped by a run (the event's kind), when its latest skip says
 * why: the only reason of one that has no ledger row (monitor/occurrences.ts, readOccurrenceCounts).
 */
export const SKIP_REASONS = {
  'busy-skip': 'skipped-busy',
  'replaced-skip': 'skipped-replaced',
  'backoff-skip': 'skipped-backoff',
  'paused-skip': 'skipped-paused',
  'exhausted-skip': 'exhausted',
} as const;

/** SKIP_REASONS as SQL: the kinds (an IN list) and the CASE that names an event's reason (constants only). */
export const SKIP_KINDS_SQL = Object.keys(SKIP_REASONS)
  .map((k) => `'${k}'`)
  .join(', ');
export const skipReasonSql = (kind: string): string =>
  `CASE ${kind} ${Object.entries(SKIP_REASONS)
    .map(([k, r]) => `WHEN '${k}' THEN '${r}'`)
    .join(' ')} END`;

/** One occurrence of a job within a time range (readOccurrencesBetween), for the status page's grid. */
export interface RangeOccurrence {
  job: string;
  window: string;
  /** Its scheduled time, else when it was first claimed or skipped. */
  at: Date;
  /** A reason of monitor/occurrences.ts's OCCURRENCE_REASONS, judged as readOccurrenceCounts judges it. */
  reason: string;
  attempts: number;
  maxAttempts: number | null;
  /** The window's generation (null: no ledger row, only skip events). */
  generation: string | null;
}

/** How many of a job's occurrences ended with one reason (readOccurrenceCounts). */
export interface OccurrenceCount {
  job: string;
  reason: string;
  n: number;
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

/** One window of a job's ledger, as the status page lists it. */
export interface WindowRow {
  window: string;
  scheduledAt: Date | null;
  /** As recorded: running, completed, skipped, failed, lost or missed. */
  outcome: string;
  attempts: number;
  generation: string;
  owner: string;
  firstStartedAt: Date;
  startedAt: Date;
  finishedAt: Date | null;
  completedAt: Date | null;
  exitCode: number | null;
  /** The attempt budget it was claimed or refused under (run --max-attempts); null: none. */
  maxAttempts?: number | null;
}

/** A window's recorded output (--record-output): the tail of its latest recorded attempt. */
export interface WindowOutput {
  window: string;
  /** The generation and attempt the output is of (a later attempt may not have recorded one). */
  generation: string;
  attempt: number;
  /** The window's outcome now, and its exit code (of its latest attempt). */
  outcome: string;
  exitCode: number | null;
  recordedAt: Date;
  /** How many bytes the child wrote in all; `tail` is the last of them. */
  bytes: number;
  tail: Buffer;
}

export interface RecordOutputInput {
  job: string;
  window: string;
  generation: string;
  tail: Buffer;
  bytes: number;
  answerTimeoutMs?: number | undefined;
}

export interface EventCount {
  job: string;
  kind: string;
  host: string;
  n: number;
}

export interface HostClock {
  host: string;
  offsetMs: number;
  uncertaintyMs: number;
}

/** What `leasejob prune` needs to know of one job. */
export interface RetentionRow {
  name: string;
  /** How its windows are named (the registry's --window-format, --window-offset, --tz): prune aligns its horizon to a window's start. */
  windowFormat: string | null;
  windowOffset: string | null;
  tz: string | null;
  /** Its --max-delay: a horizon must be older, or an occurrence still due would be missed. */
  maxDelayMs: number | null;
  /** Windows scheduled before this may have been pruned: such an occurrence is missed, never run. */
  retainedFrom: Date | null;
  /** Events 1..N of the job were pruned (0: none). */
  prunedThroughSeq: number;
  /** Windows pruned in all. */
  prunedWindows: number;
  /** When the lease's current generation was acquired: its events are kept (a late finish or a takeover reads them). */
  leaseAcquiredAt: Date | null;
}

/** Retention (`leasejob prune`): small batches, each its own transaction. */
/** The host under which prune keeps the event counts of the hosts it forgets (not a host name: parentheses). */
export const PRUNED_HOSTS = '(pruned)';

export interface RetentionStore {
  /** Every registered job (or the one named), on the store's clock. */
  read(name?: string): Promise<{ dbNow: Date; jobs: RetentionRow[] }>;
  /** Raise these jobs' horizon to `horizon` (never lowers it), in one statement; done before any of their windows is deleted. */
  raiseHorizon(jobs: readonly string[], horizon: Date): Promise<void>;
  /**
   * Up to `limit` of the job's final windows (completed, skipped, missed) scheduled before
   * `horizon`, never its latest completed one, never an open one (running, failed, lost).
   */
  pruneWindows(job: string, horizon: Date, limit: number): Promise<{ deleted: number; more: boolean }>;
  /** Up to `limit` of the job's oldest events, stopping at the first one written at or after `before`. */
  pruneEvents(
    job: string,
    before: Date,
    limit: number,
  ): Promise<{ deleted: number; throughSeq: number; more: boolean }>;
  /**
   * Forget hosts not seen since `before` (every pod of Kubernetes was one, before runs were keyed
   * by node): their clock readings go, and their per-host event counts are added to host
   * PRUNED_HOSTS, so per-job totals never step back. The number of distinct hosts (that would
   * be) forgotten; with `dryRun` nothing is written.
   */
  pruneHosts(before: Date, dryRun: boolean): Promise<number>;
  /** What pruneWindows and pruneEvents would delete of the job in all; nothing written. */
  countPrunable(job: string, horizon: Date, eventsBefore: Date): Promise<{ events: number; windows: number }>;
  /**
   * Give the space freed back to the file system (the embedded store; PostgreSQL's autovacuum
   * makes it reusable). `full`: rewrite the file (VACUUM), which an older file needs once.
   */
  reclaimSpace?(opts: { full: boolean }): Promise<{ mode: 'incremental' | 'full' | 'none'; freedBytes: number }>;
}

/** Who made an operator write and the version it read (compare-and-set; undefined: the current one, read in the same statement). */
export interface OperatorWrite {
  job: string;
  expectVersion?: number | undefined;
  /** user@host of the operator. */
  by: string;
  hostTime: Date;
}

/**
 * What an operator write did. `unknown`: no such job; `conflict`: the version was not the one
 * expected; `busy`: a live owner holds the lease (of that window, for mark); `noop`: nothing to
 * change; `bad-until`: the pause would already be over on the store's clock; `done`: written,
 * `version` is the new one and `seq` the event recording it. Nothing is written but on `done`.
 */
export interface OperatorResult {
  status: 'unknown' | 'conflict' | 'busy' | 'noop' | 'bad-until' | 'done';
  version: number | null;
  seq: string | null;
  dbNow: Date;
  holder?: string | null;
  holderGeneration?: string | null;
  holderWindow?: string | null;
  /** release: the holder still renews (a live owner, not a stale one). */
  live?: boolean;
  pausedUntil?: Date | null;
  previousOutcome?: string | null;
}

export interface PauseInput extends OperatorWrite {
  reason?: string | undefined;
  /** An instant, or a span from now on the store's clock; neither: until resumed. */
  until?: Date | undefined;
  untilMs?: number | undefined;
}

export interface MarkInput extends OperatorWrite {
  window: string;
  outcome: 'completed' | 'skipped';
  reason?: string | undefined;
}

export interface ReleaseInput extends OperatorWrite {
  /** Release a live holder too (its child is stopped at its next renewal). */
  force: boolean;
}

/** The span within which job-changed events count as hosts disagreeing (check warns at JOB_CHANGES_WARN). */
export const JOB_CHANGES_WINDOW_MS = 3_600_000;
export const JOB_CHANGES_WARN = 3;

export interface LeaseStore {
  readonly kind: 'postgresql' | 'sqlite';
  /** Retention (`leasejob prune`); a store of your own may leave it out (prune then refuses it). */
  readonly retention?: RetentionStore;
  /** Where the state lives, for logs and status (never a password). */
  readonly location: string;
  /**
   * Whether an error this store threw is worth a retry (the server restarting or unreachable,
   * the connection dropped, no answer in time): each store knows its own driver's errors. A
   * store of your own may leave it out: then a network error or a timeout is (isTransient).
   */
  isTransient?(err: unknown): boolean;
  acquire(i: AcquireInput): Promise<AcquireRow>;
  /** Ask the lease's live holder to stop if it runs an earlier occurrence (run --on-busy replace). */
  requestReplace?(i: ReplaceRequest): Promise<ReplaceAnswer>;
  /** Undefined when the lease is no longer ours (taken, expired or released). */
  renew(
    job: string,
    owner: string,
    generation: string,
    ttlMs: number,
    lockTimeoutMs: number,
    answerTimeoutMs: number,
    /** The holder's latest clock-offset measurement, recorded with the renewal (PostgreSQL). */
    offset?: { offsetMs: number; uncertaintyMs: number },
  ): Promise<RenewRow | undefined>;
  /**
   * After an acquire whose answer never came, tried again: the lease `owner` holds as
   * `generation` (that acquire committed), renewed from now, and the attempt its window was
   * claimed with. Undefined when that generation no longer holds it. An owner names one
   * process, so no other runner's lease can match.
   */
  adopt?(i: AdoptInput): Promise<{ attempt: number; dbNow: Date; expiresAt: Date } | undefined>;
  /**
   * After an acquire left unanswered (given up, or a signal): release the lease if `owner`
   * holds it, as a finish with no outcome would; its window stays open for the next run. The
   * generation released, if any. Both are optional for a store of your own: without them, such
   * a lease expires by itself.
   */
  abandon?(job: string, owner: string, hostTime: Date, answerTimeoutMs: number): Promise<string | undefined>;
  /** Record the window outcome (if still held) and release. held=false: the lease was not ours. */
  finish(i: FinishInput): Promise<{ held: boolean; dbNow: Date }>;
  recordEvent(e: RecordEventInput): Promise<string>;
  /**
   * Keep the output's tail with the window, for the attempt of `generation` (false when the
   * window has been claimed by another since). Optional for a store of your own.
   */
  recordOutput?(i: RecordOutputInput): Promise<boolean>;
  /** The job's windows with a recorded output, newest first (at most `limit`). */
  readOutputs?(job: string, limit: number): Promise<WindowOutput[]>;
  /**
   * Sequences of windows under one lease (run --catch-up, backfill); optional for a store of
   * your own, which then cannot run them. claimWindow: one more window for the generation
   * holding the lease, checked as acquire checks its own. finishWindow: finish() without the
   * release (safe to repeat). recordMissed: how many were recorded, undefined when the lease
   * is not held. readWindows: the ledger's rows for these keys.
   */
  claimWindow?(i: ClaimWindowInput): Promise<ClaimWindowRow>;
  finishWindow?(i: FinishInput): Promise<{ held: boolean; dbNow: Date }>;
  recordMissed?(i: RecordMissedInput): Promise<number | undefined>;
  readWindows?(job: string, keys: readonly string[]): Promise<WindowStates>;

  /** Administrative release: expire now, keep the generation. */
  release(job: string, hostTime: Date): Promise<{ owner: string; generation: string } | undefined>;
  /** Pause the job (or change its pause's reason and end): compare-and-set on its version. */
  pause(i: PauseInput): Promise<OperatorResult>;
  /** End the job's pause now: compare-and-set on its version. */
  resume(i: OperatorWrite): Promise<OperatorResult>;
  /** A window handled by hand: final from now on (a run skips it); refused while a live owner holds it. */
  mark(i: MarkInput): Promise<OperatorResult>;
  /** Administrative release with compare-and-set; a live holder only with `force`. */
  releaseLease(i: ReleaseInput): Promise<OperatorResult>;
  /** Every registered job (or one), on the store's clock. */
  readJobRows(name?: string): Promise<{ dbNow: Date; rows: JobRow[] }>;
  /** The distinct schedule keys of window-from-schedule jobs (or of the one named), on the store's clock. */
  readScheduleKeys(name?: string): Promise<{ dbNow: Date; keys: ScheduleKey[] }>;
  /** The PostgreSQL schema's newest applied migration (the embedded store migrates itself: absent). */
  readSchemaVersion?(): Promise<number | undefined>;
  /**
   * For the jobs of these keys (or the one named): each due window of their key that is not
   * final (no row, or a row whose completed_at is NULL), with its row's outcome and generation
   * (null: no row). A window without a row whose occurrence predates the job's registration is
   * not expected of it, and left out. Each job's windows come together, in its group's order;
   * only its oldest NOT_COMPLETED_LISTED and its group's latest window, with `count` saying how
   * many there are in all (a broken job with a long lookback must not make every read large).
   */
  readDueNotCompleted(groups: DueGroup[], name?: string): Promise<DueNotCompleted[]>;
  /** The job's latest `limit` events, oldest first. */
  /** The job's latest `limit` events in sequence order; with `window`, only that occurrence's. */
  readHistory(job: string, limit: number, window?: string): Promise<HistoryEvent[]>;
  /**
   * The job's windows for its status page: every open one (at most `limit`, newest started
   * first), then its latest `limit` completed ones (newest completed first). Two index reads,
   * however long the ledger. Optional for a store of your own: the page then lists the open
   * windows status reads.
   */
  readJobWindows?(job: string, limit: number): Promise<WindowRow[]>;
  /**
   * Occurrences by job and final reason (monitor/occurrences.ts), of windows scheduled (else
   * first claimed) within the job's --alert-lookback, else the last day, and of occurrences with
   * no ledger row that a run skipped within it (SKIP_REASONS, by the latest skip): one statement,
   * a grouped read of the ledger and of the skip events. Optional for a store of your own (then
   * not reported).
   */
  readOccurrenceCounts?(job?: string): Promise<OccurrenceCount[]>;
  /**
   * The occurrences of these jobs in [from, to): windows scheduled (else first claimed) then, at
   * most `perJob` per job (the latest), each with its reason as readOccurrenceCounts judges it,
   * and occurrences with no ledger row that a run skipped then (by the latest skip). One
   * statement for the whole page, whatever the number of jobs (the status page's grid).
   * Optional for a store of your own (the page then reads each job as `history --by-occurrence`).
   */
  readOccurrencesBetween?(jobs: readonly string[], from: Date, to: Date, perJob: number): Promise<RangeOccurrence[]>;
  /** Event counts by (job, kind, host), of these kinds only (a scrape exports a few of them). */
  readEventCounts(kinds: readonly string[]): Promise<EventCount[]>;
  readHostClocks(): Promise<HostClock[]>;
  /**
   * The replication setup the store sees (replication.ts): what a failover can lose. The
   * embedded store has none. Never throws for what the server hides: that is in `unchecked`.
   * Optional for a store of your own (then not reported).
   */
  readReplication?(): Promise<ReplicationReport>;
  ping(): Promise<void>;
  /** limitMs: how long a statement still in flight may hold it up (the store's default when unset). */
  close(limitMs?: number): Promise<void>;
}

/** What a job's due windows follow from: every job with the same key has the same due windows. */
export interface ScheduleKey {
  schedule: string;
  tz: string | null;
  windowFormat: string | null;
  windowOffset: string | null;
  alertAfterMs: number | null;
  /** `run --alert-lookback`: how far back due occurrences are judged (null: the default). */
  alertLookbackMs: number | null;
}

/** The windows due for every job of a schedule key (past their grace, within the lookback). */
export interface DueGroup extends ScheduleKey {
  windows: Array<{
    window: string;
    /** The same occurrence's `+00:00` spelling, for a zone that is an alias of UTC (monitor.ts). */
    legacy?: string | undefined;
    scheduledAt: Date;
  }>;
}

/** How many of a job's due windows that are not final readDueNotCompleted lists (the oldest). */
export const NOT_COMPLETED_LISTED = 10;

/** One due window of one job that is not final. */
export interface DueNotCompleted {
  job: string;
  /** How many of the job's due windows are not final, listed or not. */
  count: number;
  window: string;
  /** The row's outcome (failed, lost, missed, running), or null when no run claimed it. */
  outcome: string | null;
  generation: string | null;
}

/**
 * How long acquire waits for the lease row when a fenced transaction holds it: short enough
 * that a contender facing a working owner still leaves within about a second.
 */
export const ACQUIRE_LOCK_TIMEOUT_MS = 500;

/**
 * From when a due window without a row in the ledger counts as not run (monitoring): not before
 * the job was registered, nor before its current schedule took effect (a schedule change: the
 * new schedule's earlier occurrences were never due), nor before its retention horizon, where
 * `prune` deleted completed windows: retention never makes a completed occurrence look missed.
 */
export function expectedFrom(
  registeredMs: number,
  retainedFromMs: number | null,
  scheduleSinceMs?: number | null,
): number {
  return Math.max(registeredMs, retainedFromMs ?? registeredMs, scheduleSinceMs ?? registeredMs);
}

/**
 * Whether a sequence's planner may count on a window: false when it is final (completed,
 * skipped, marked) or scheduled before the retention horizon (pruned, or as good as:
 * the store's gate refuses it). The store decides again when it claims the window.
 */
export function windowPending(
  states: WindowStates,
  w: { key: string; scheduledAt: Date },
): { pending: boolean; pruned: boolean } {
  const s = states.windows.get(w.key);
  const pruned = s?.completedAt == null && states.retainedFrom !== null && w.scheduledAt < states.retainedFrom;
  return { pending: !pruned && s?.completedAt == null, pruned };
}

/**
 * How a window was claimed, from its window-claimed event's detail: by `backfill`, by `run
 * --catch-up` for an earlier occurrence, or (null) by a run for its own. The ledger row keeps
 * the latest claim's (windows.claimed_as; PostgreSQL's claim_window() says the same in SQL).
 */
export function claimedAs(detail: Record<string, unknown> | undefined): 'backfill' | 'catch-up' | null {
  if (detail?.backfill === true) return 'backfill';
  return detail?.role === 'catch-up' ? 'catch-up' : null;
}

/** How long recording an event (busy skip, renewal failures, clock jump) waits for its answer by default. */
export const EVENT_TIMEOUT_MS = 5_000;

/** Node's network errors, and a bound on a connection or an answer that ran out: worth a retry whatever the store. */
const NETWORK_ERRNOS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
]);

/** The `code` of an error (a driver's SQLSTATE, Node's errno), or ''. */
export function errorCode(err: unknown): string {
  return typeof err === 'object' && err !== null && 'code' in err ? String((err as { code: unknown }).code) : '';
}

/** A connection refused, dropped or silent, whatever the store. */
export function isNetworkError(err: unknown): boolean {
  return NETWORK_ERRNOS.has(errorCode(err));
}

/** What the run path asks of an error from `store`: worth a retry (the store's own answer, LeaseStore.isTransient)? */
export function isTransient(store: Pick<LeaseStore, 'isTransient'>, err: unknown): boolean {
  return store.isTransient ? store.isTransient(err) : isNetworkError(err);
}
