// The types the run modules share (runner, sequence, keeper, finish) and the public library API
// exports: what a run is asked to do, what its task is given, and what it returns. Kept apart so
// that those modules import them from here, not from one another.
import type { OutputTail } from './output-tail.js';

/** `replaced`: a later occurrence asked, through the lease, for this run to stop (--on-busy replace). */
export type LossReason =
  { kind: 'lease-lost'; detail: string } | { kind: 'deadline'; detail: string } | { kind: 'replaced'; detail: string };

export type OnBusy = 'skip' | 'wait' | 'fail' | 'replace';

export interface WindowClaim {
  key: string;
  /** More than MAX_AHEAD_MS ahead of the database clock: not run (aborted 'not-due', window left open). */
  scheduledAt?: Date | undefined;
  rerun?: boolean;
  maxDelayMs?: number | undefined;
}

export interface RunOptions {
  name: string;
  ttlMs: number;
  /** Default ttl/3. */
  renewIntervalMs?: number;
  /** How long the task may take to stop once told to (must fit inside the TTL). */
  killGraceMs: number;
  window?: WindowClaim | undefined;
  onBusy?: OnBusy;
  waitTimeoutMs?: number | undefined;
  maxRuntimeMs?: number | undefined;
  /** Attempts a window may have in all (run --max-attempts); undefined: no limit. */
  maxAttempts?: number | undefined;
  /** Tries after a failed one inside this run, under the same lease (run --retries). */
  retries?: number | undefined;
  /**
   * The backoff's base (run --retry-delay): retries wait jitteredBackoffMs, and an acquire
   * within backoffMs of the window's last failure skips it ('backoff'). Undefined: retries
   * wait DEFAULT_RETRY_DELAY_MS and triggers are not spaced.
   */
  retryDelayMs?: number | undefined;
  /**
   * A run of one window with retries: each try told as a sequence's windows are ('start',
   * 'end'; at most once per try), so that each has its own reports (pings, webhook).
   */
  onTry?: ((e: WindowEvent) => void | Promise<void>) | undefined;
  /** Aborting it stops the task (e.g. SIGTERM to the runner), the lease is then released. */
  signal?: AbortSignal | undefined;
  /** What the registry records about the job (schedule, tz, window settings). */
  spec?: Record<string, string | number | null> | undefined;
  /**
   * The owner id (default: `host:pid:random`, new for each call). One given here may be shared
   * by other calls, so a lease held under it is never taken for this call's own: an acquire
   * whose answer was lost is then neither taken up nor given back (it expires by itself).
   */
  owner?: string;
  /**
   * What the task wrote, read once it has ended (--record-output): kept with the window, for
   * this attempt, just before the outcome is recorded. Best effort, and only with a window.
   */
  output?: (() => OutputTail | undefined) | undefined;
  /**
   * Several windows one after another under this one lease (run --catch-up, backfill): the
   * lease is acquired without a window, then each is claimed, run and recorded in turn
   * (windows.ts). `window` is then unused.
   */
  sequence?: SequenceOptions | undefined;
}

/** Why the task's AbortSignal fired, and how long it has left to finish. */
export type AbortReason =
  | (LossReason & { graceMs: number })
  | { kind: 'max-runtime'; graceMs: number }
  | { kind: 'cancelled'; reason: unknown; graceMs: number }
  | { kind: 'not-due'; detail: string; graceMs: number };

/** When the task must be told to stop unless the lease is renewed first (the keeper's stop point). */
export interface LeaseDeadline {
  /** Milliseconds on the monotonic clock (process.hrtime: the same for every process of the host). */
  stopAtMono(): number;
  /** Called with the new stop point after each renewal; returns what unsubscribes. */
  onStopAtChange(listener: (stopAtMono: number) => void): () => void;
}

export interface TaskContext {
  signal: AbortSignal;
  /** The lease's stop point and its moves (a process of the task's own can stop it there by itself). */
  deadline?: LeaseDeadline | undefined;
  /** The lease generation as a decimal string: the fencing token. */
  fenceToken: string;
  idempotencyKey: string;
  owner: string;
  window?: string | undefined;
  attempt: number;
  scheduledAt?: Date | undefined;
}

export type RunResult<T> =
  | { status: 'completed'; value: T; generation: string; attempt: number }
  | { status: 'failed'; error: unknown; generation: string; attempt: number; aborted?: AbortReason; released: boolean }
  | {
      status: 'skipped';
      reason: 'busy' | 'done' | 'missed' | 'paused' | 'cancelled' | 'exhausted' | 'backoff';
      holder?: string | null;
      completedAt?: Date | null;
      /** exhausted, backoff: the attempts the window has had; backoff: when it may run again. */
      attempts?: number;
      nextAt?: Date | null;
    };

/** One window of a sequence. */
export interface SequenceWindow extends WindowClaim {
  /** What it is in the sequence, for logs and events: an earlier occurrence caught up, this run's own, a backfill's. */
  role?: 'catch-up' | 'current' | 'backfill';
}

/** Occurrences not to run, recorded as missed before the first window runs, with the log line that says why. */
export interface MissedGroup {
  reason: 'catch-up-limit' | 'max-delay';
  windows: Array<{ key: string; scheduledAt?: Date | undefined }>;
  /** Log fields (the limit, the max delay). */
  fields?: Record<string, unknown>;
}

export interface SequencePlan {
  run: SequenceWindow[];
  missed?: MissedGroup[];
}

/**
 * What a sequence tells as it goes, one call per step, in order (awaited): where per-window
 * work plugs in (progress, pings, notifications). An error thrown here is logged and ignored.
 */
export type WindowEvent =
  | {
      phase: 'planned';
      total: number;
      missed: number;
      /** The occurrences recorded missed before the first window, by reason, with how many were (recordMissed's count). */
      missedGroups: Array<MissedGroup & { count: number }>;
    }
  | { phase: 'start'; index: number; total: number; window: SequenceWindow; attempt: number; generation: string }
  | {
      phase: 'end';
      index: number;
      total: number;
      window: SequenceWindow;
      generation: string;
      /**
       * done: completed already (not run); missed: past the max delay or the retention horizon
       * (not run); paused: the job was paused meanwhile (not run, the sequence stops); not-due: ahead of
       * the database clock; lost: the lease was found gone at the claim or the finish, or the
       * outcome could not be recorded (not recorded; the sequence stops after not-due and lost).
       */
      outcome: 'completed' | 'failed' | 'done' | 'missed' | 'paused' | 'not-due' | 'lost' | 'exhausted' | 'backoff';
      attempt?: number | undefined;
      durationMs?: number | undefined;
      exitCode?: number | undefined;
      error?: unknown;
      /**
       * This window's result, as runWithLease would return it for this window alone: what its
       * reports say (the ping's exit status, lost or failed), one window at a time.
       */
      result: RunResult<unknown>;
    };

export interface SequenceOptions {
  /**
   * Called once the lease is held, with the database's time: the windows to run, oldest
   * first, and the occurrences to record as missed. Reading the ledger here, under the lease,
   * sees what no other runner can change meanwhile.
   */
  plan(dbNow: Date): Promise<SequencePlan>;
  /** After a failed window, go on with the next (backfill --keep-going); else the rest stay open. */
  keepGoing?: boolean;
  /** Added to each window-claimed event. */
  detail?: Record<string, unknown>;
  onWindow?: ((e: WindowEvent) => void | Promise<void>) | undefined;
}
