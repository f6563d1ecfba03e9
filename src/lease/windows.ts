// The window loop: under a lease already held, each window in turn is claimed, its task started,
// the lease kept meanwhile, the task stopped when the lease is in doubt, and its outcome
// recorded. A single run is a sequence of one window (its claim came with the acquire, and its
// finish releases the lease); run --catch-up and backfill are longer ones, claimed one by one
// and released once at the end. What differs is data (Windows), not a second loop.
import { MAX_AHEAD_MS, monoNow, sleep, type OffsetMeasurement, type Stamp } from '../clock.js';
import { LeaseUnavailableError } from '../errors.js';
import type { Logger } from '../log.js';
import { EVENT_TIMEOUT_MS, isTransient, type LeaseStore as Store } from '../store/contract.js';
import { unlessAborted } from './acquire.js';
import { budgetSkip, noRetry, retryWaitMs } from './attempts.js';
import { exitCodeOf, finishDetail, finishWithRetry, recordLoss, recordOutput, stoppedExitCode } from './finish.js';
import { keepRunLease, startRunLease, type LeaseKeeper, type LeaseTiming } from './keeper.js';
import type {
  AbortReason,
  MissedGroup,
  RunOptions,
  RunResult,
  SequenceOptions,
  SequenceWindow,
  TaskContext,
  WindowEvent,
} from './types.js';

/** The lease as the acquire answered it. */
export interface Held {
  owner: string;
  generation: string;
  sent: Stamp;
  received: Stamp;
  timing: LeaseTiming;
  offset: OffsetMeasurement | undefined;
  dbNow?: Date | undefined;
}

/** What the windows of one lease are, and how they are claimed and recorded. */
export type Windows =
  /** The acquire claimed `window` (none: a run without one) as `attempt`; its finish releases the lease. */
  | { kind: 'one'; window: SequenceWindow | undefined; attempt: number }
  /** Claimed one by one once the lease is held, the lease released after the last. */
  | { kind: 'sequence'; sequence: SequenceOptions };

/** What one lease's windows share while it is held. */
interface Lease<T> {
  store: Store;
  opts: RunOptions;
  task: (ctx: TaskContext) => Promise<T>;
  log: Logger;
  held: Held;
  windows: Windows;
  /**
   * A window's finish also releases the lease: the one window of a run without retries. With
   * --retries each try is recorded under the lease kept, and the lease released after the last.
   */
  finishReleases: boolean;
  keeper: LeaseKeeper;
  eventTimeoutMs: number;
  startedMono: number;
  /** Why the whole lease stops (lost, a signal); the running window is aborted with it. */
  stopped: AbortReason | undefined;
  /** The window whose task runs now. */
  current: WindowRun | undefined;
  /** A task was started under this lease: a loss then counts (recordLoss). */
  taskStarted: boolean;
  /** Held, released (by the one window's finish or the release), found not held, or unknown (no answer). */
  end: 'held' | 'released' | 'not-held' | 'unknown';
  tell(e: WindowEvent): Promise<void>;
  /** The database's time now, from the acquire's answer and the monotonic clock since. */
  dbNowAt(): Date;
}

interface WindowRun {
  controller: AbortController;
  aborted?: AbortReason;
}

/** How a window's task ended. */
interface TaskEnd<T> {
  attempt: number;
  ok: boolean;
  value: T | undefined;
  error: unknown;
  aborted: AbortReason | undefined;
  started: boolean;
  durationMs: number;
}

/** Where a window is in its sequence, for its events. */
interface At {
  index: number;
  total: number;
  window: SequenceWindow;
  generation: string;
}

/** How one window ended, and whether the sequence stops there. */
interface WindowEnded<T> {
  result: RunResult<T>;
  last: boolean;
}

export async function runWindows<T>(
  store: Store,
  opts: RunOptions,
  task: (ctx: TaskContext) => Promise<T>,
  log: Logger,
  held: Held,
  windows: Windows,
): Promise<RunResult<T>> {
  const lease = holdLease(store, opts, task, log, held, windows);
  const unwire = startRunLease(lease.keeper, held, opts, (reason) => stopLease(lease, reason), log);
  const results: RunResult<T>[] = [];
  let thrown: { err: unknown } | undefined;
  try {
    const plan = await planWindows(lease);
    for (const [index, w] of plan.entries()) {
      if (lease.stopped && windows.kind === 'sequence') break;
      const ended = await runWindow(lease, w, index, plan.length);
      results.push(ended.result);
      if (ended.last) break;
    }
  } catch (err) {
    // A statement of the sequence failed (the database went away): the lease is still given
    // back below if it can be, and the error is the run's.
    thrown = { err };
  } finally {
    lease.keeper.stop();
    unwire();
  }
  if (lease.end === 'held') await releaseLease(lease);
  if (lease.end === 'released' || lease.end === 'not-held') await recordLeaseLoss(lease);
  if (thrown) throw thrown.err;
  return windows.kind === 'one' ? results[0]! : sequenceResult(lease, results);
}

function stopLease<T>(lease: Lease<T>, reason: AbortReason): void {
  lease.stopped ??= reason;
  abortWindow(lease.current, reason);
}

function abortWindow(w: WindowRun | undefined, reason: AbortReason): void {
  if (!w || w.aborted) return;
  w.aborted = reason;
  w.controller.abort(reason);
}

const doubtful = (r: AbortReason | undefined): boolean => r?.kind === 'lease-lost' || r?.kind === 'deadline';

function holdLease<T>(
  store: Store,
  opts: RunOptions,
  task: (ctx: TaskContext) => Promise<T>,
  log: Logger,
  held: Held,
  windows: Windows,
): Lease<T> {
  // The runner keeps one connection (a second opens only while one is stuck): an event whose
  // connection went silent must free it well before the next renewal needs it.
  const eventTimeoutMs = Math.min(EVENT_TIMEOUT_MS, held.timing.renewIntervalMs / 2);
  const onWindow = windows.kind === 'sequence' ? windows.sequence.onWindow : opts.onTry;
  const window = windows.kind === 'one' ? windows.window?.key : undefined;
  const lease: Lease<T> = {
    store,
    opts,
    task,
    log,
    held,
    windows,
    finishReleases: windows.kind === 'one' && !(windows.window && (opts.retries ?? 0) > 0),
    eventTimeoutMs,
    keeper: keepRunLease(
      store,
      { job: opts.name, owner: held.owner, generation: held.generation, window },
      held.timing,
      held.sent,
      log,
      eventTimeoutMs,
      (reason) => stopLease(lease, reason),
    ),
    startedMono: monoNow(),
    stopped: undefined,
    current: undefined,
    taskStarted: false,
    end: 'held',
    async tell(e) {
      try {
        await onWindow?.(e);
      } catch (err) {
        log.warn({ err: (err as Error).message, phase: e.phase }, 'window event handler failed');
      }
    },
    dbNowAt: () => new Date((held.dbNow ?? new Date(held.received.wall)).getTime() + (monoNow() - held.received.mono)),
  };
  return lease;
}

/**
 * The windows to run: the one the acquire claimed, or the sequence's plan (read under the lease,
 * where no other runner can change it) with its missed occurrences recorded first.
 */
async function planWindows<T>(lease: Lease<T>): Promise<Array<SequenceWindow | undefined>> {
  if (lease.windows.kind === 'one') return [lease.windows.window];
  const plan = lease.stopped ? { run: [], missed: [] } : await lease.windows.sequence.plan(lease.dbNowAt());
  let missed = 0;
  const missedGroups: Array<MissedGroup & { count: number }> = [];
  for (const group of plan.missed ?? []) {
    if (lease.stopped || group.windows.length === 0) continue;
    const n = await recordMissed(lease, group);
    if (n === undefined) break;
    missed += n;
    if (n > 0) missedGroups.push({ ...group, count: n });
  }
  await lease.tell({ phase: 'planned', total: plan.run.length, missed, missedGroups });
  return plan.run;
}

/** A group of occurrences recorded missed: how many were; undefined when the lease is gone (it then stops). */
async function recordMissed<T>(lease: Lease<T>, group: MissedGroup): Promise<number | undefined> {
  const n = await lease.store.recordMissed!({
    job: lease.opts.name,
    owner: lease.held.owner,
    generation: lease.held.generation,
    windows: group.windows,
    reason: group.reason,
    hostTime: new Date(),
  });
  if (n === undefined) {
    lease.end = 'not-held';
    stopLease(lease, {
      kind: 'lease-lost',
      detail: 'recording missed occurrences found the lease taken, expired or released',
      graceMs: 0,
    });
    return undefined;
  }
  lease.log.warn(
    {
      count: n,
      reason: group.reason,
      oldest: group.windows[0]!.key,
      newest: group.windows.at(-1)!.key,
      ...group.fields,
    },
    group.reason === 'max-delay'
      ? 'occurrences older than --max-delay recorded as missed'
      : 'occurrences beyond --catch-up-limit recorded as missed',
  );
  return n;
}

/** One window: due, claimed, its task run while the lease is kept, its outcome recorded. */
async function runWindow<T>(
  lease: Lease<T>,
  w: SequenceWindow | undefined,
  index: number,
  total: number,
): Promise<WindowEnded<T>> {
  const { windows, held } = lease;
  const wlog = windows.kind === 'sequence' && w ? lease.log.child({ window: w.key }) : lease.log;
  const at = w && { index, total, window: w, generation: held.generation };
  const notDue = lease.stopped ? undefined : notDueBy(lease, w, wlog);
  if (notDue && windows.kind === 'sequence') {
    // Not claimed: the window stays open for the run that comes at its time.
    const result = failed<T>(lease, notDueError(notDue), 1, notDue, false);
    if (at) await lease.tell({ phase: 'end', ...at, outcome: 'not-due', result });
    return { result, last: true };
  }
  const claimed = windows.kind === 'one' ? { attempt: windows.attempt } : await claim(lease, w!, at!, wlog);
  if ('result' in claimed) return claimed;
  let attempt = claimed.attempt;
  for (let tries = 0; ; tries++) {
    if (at) await lease.tell({ phase: 'start', ...at, attempt });
    const ran = await runTask(lease, w, attempt, notDue, wlog);
    const ended = await recordWindow(lease, w, ran, at, wlog, retriedHere(lease, w, at, tries, ran));
    // --retries: the failed try is recorded, the lease still held; the next one is a new attempt.
    if (!w || !at || lease.end !== 'held' || noRetry(lease.opts, tries, ran) !== undefined) return ended;
    const next = await retryClaim(lease, w, at, tries + 1, wlog);
    if (next !== undefined) attempt = next;
    // Told to stop during the backoff (a signal, the lease in doubt): that is the run's end, as
    // during a try; the failed try keeps its own exit code in the ledger.
    else if (lease.stopped && ended.result.status === 'failed')
      return { result: { ...ended.result, aborted: lease.stopped }, last: true };
    else return ended;
  }
}

/**
 * Retry number `retry` of a failed window: after its backoff (cut short when the lease is in
 * doubt or a signal comes), claimed again under the same lease, the budget judging it as any
 * claim. Its attempt, or undefined when it is not to be tried (stopped, past --max-delay, the
 * budget spent, the lease gone).
 */
async function retryClaim<T>(
  lease: Lease<T>,
  w: SequenceWindow,
  at: At,
  retry: number,
  log: Logger,
): Promise<number | undefined> {
  const waitMs = Math.round(retryWaitMs(lease.opts, retry));
  // At info: the try that failed is no failure yet (logOutcome warns once none is left).
  log.info({ retry, of: lease.opts.retries, waitMs }, 'try failed: retrying after the backoff, lease kept');
  const run: WindowRun = { controller: new AbortController() };
  lease.current = run;
  if (lease.stopped) abortWindow(run, lease.stopped);
  await sleep(waitMs, run.controller.signal);
  lease.current = undefined;
  if (lease.stopped || run.aborted) return undefined;
  if (
    w.maxDelayMs !== undefined &&
    w.scheduledAt &&
    lease.dbNowAt().getTime() - w.scheduledAt.getTime() > w.maxDelayMs
  ) {
    log.warn({ maxDelayMs: w.maxDelayMs }, 'not retried: the occurrence is now older than --max-delay');
    return undefined;
  }
  const c = await claim(lease, w, at, log, true);
  return 'result' in c ? undefined : c.attempt;
}

/** The window's occurrence, ahead of the database clock by more than MAX_AHEAD_MS: not to be run now. */
function notDueBy<T>(lease: Lease<T>, w: SequenceWindow | undefined, log: Logger): AbortReason | undefined {
  if (w?.scheduledAt === undefined || lease.held.dbNow === undefined) return undefined;
  // The clock that named it runs ahead (a crontab host's, or a Job named by hand). Run now, its
  // window would be done before its time and the run that comes at that time would find it done.
  const dbNow = lease.dbNowAt();
  const aheadMs = w.scheduledAt.getTime() - dbNow.getTime();
  if (aheadMs <= MAX_AHEAD_MS) return undefined;
  const detail =
    `occurrence ${w.scheduledAt.toISOString()} is ${Math.round(aheadMs / 1000)} s ahead of the ` +
    `database clock (${dbNow.toISOString()})`;
  log.error(
    { generation: lease.held.generation, scheduledAt: w.scheduledAt, dbNow, aheadMs: Math.round(aheadMs) },
    'occurrence not due by the database clock: not started, window left open',
  );
  return { kind: 'not-due', detail, graceMs: 0 };
}

const notDueError = (r: AbortReason): LeaseUnavailableError =>
  new LeaseUnavailableError(
    `not started: ${'detail' in r ? r.detail : r.kind}; check this host's clock (NTP)`,
    'E_NOT_DUE',
  );

/** A sequence's window claimed for this generation: its attempt, or how it ended unclaimed. */
async function claim<T>(
  lease: Lease<T>,
  w: SequenceWindow,
  at: At,
  log: Logger,
  retry = false,
): Promise<{ attempt: number } | WindowEnded<T>> {
  const { opts, held } = lease;
  const seq = lease.windows.kind === 'sequence' ? lease.windows.sequence : undefined;
  const c = await lease.store.claimWindow!({
    job: opts.name,
    owner: held.owner,
    generation: held.generation,
    window: w.key,
    scheduledAt: w.scheduledAt,
    rerun: w.rerun ?? false,
    maxDelayMs: w.maxDelayMs,
    maxAttempts: opts.maxAttempts,
    // A retry inside the run waited its own (jittered) backoff: only a new trigger is spaced.
    retryDelayMs: retry ? undefined : opts.retryDelayMs,
    hostTime: new Date(),
    detail: { ...seq?.detail, ...(w.role ? { role: w.role } : {}) },
  });
  if (c.outcome === 'not-held') {
    lease.end = 'not-held';
    log.warn({ generation: held.generation }, 'lease was no longer held at claim; the rest of the windows stay open');
    const result = lost<T>(lease, 'not held at claim');
    await lease.tell({ phase: 'end', ...at, outcome: 'lost', result });
    return { result, last: true };
  }
  if (c.outcome === 'done') {
    log.info({ completedAt: c.completedAt }, 'window already completed');
    const result: RunResult<T> = { status: 'skipped', reason: 'done', completedAt: c.completedAt };
    await lease.tell({ phase: 'end', ...at, outcome: 'done', result });
    return { result, last: false };
  }
  if (c.outcome === 'paused') {
    // Paused since the lease was taken (the store orders the claim against `pause`): no more
    // children until resume; this window and the rest stay open.
    log.warn({ generation: held.generation }, 'job paused: this window and the rest are not started');
    const result: RunResult<T> = { status: 'skipped', reason: 'paused' };
    await lease.tell({ phase: 'end', ...at, outcome: 'paused', result });
    return { result, last: true };
  }
  if (c.outcome === 'missed') {
    log.warn({ scheduledAt: w.scheduledAt, maxDelayMs: w.maxDelayMs }, 'window missed');
    const result: RunResult<T> = { status: 'skipped', reason: 'missed' };
    await lease.tell({ phase: 'end', ...at, outcome: 'missed', result });
    return { result, last: false };
  }
  if (c.outcome === 'exhausted' || c.outcome === 'backoff') {
    const result = budgetSkip<T>(log, opts, c.outcome, c);
    await lease.tell({ phase: 'end', ...at, outcome: c.outcome, result });
    return { result, last: false };
  }
  const attempt = c.attempt ?? 1;
  log.info(
    {
      generation: held.generation,
      attempt,
      scheduledAt: w.scheduledAt,
      role: w.role,
      index: at.index + 1,
      total: at.total,
    },
    'window claimed',
  );
  return { attempt };
}

/**
 * The window's task, told through its AbortSignal when the lease is in doubt or --max-runtime
 * passes. Never started when that came first (or the occurrence is not due): past the stop
 * point it would have to be stopped at once, or might even start after the lease expired.
 */
async function runTask<T>(
  lease: Lease<T>,
  w: SequenceWindow | undefined,
  attempt: number,
  notDue: AbortReason | undefined,
  log: Logger,
): Promise<TaskEnd<T>> {
  const { opts, held } = lease;
  const run: WindowRun = { controller: new AbortController() };
  lease.current = run;
  // Between the acquire (or the claim) and here the lease may have been lost, or a signal come.
  if (lease.stopped) abortWindow(run, lease.stopped);
  else if (notDue) abortWindow(run, notDue);
  const runtimeTimer =
    opts.maxRuntimeMs !== undefined
      ? setTimeout(() => {
          log.warn({ maxRuntimeMs: opts.maxRuntimeMs }, 'max runtime exceeded');
          abortWindow(run, { kind: 'max-runtime', graceMs: opts.killGraceMs });
        }, opts.maxRuntimeMs)
      : undefined;
  const startedMono = monoNow();
  const end: TaskEnd<T> = {
    attempt,
    ok: false,
    value: undefined,
    error: undefined,
    aborted: undefined,
    started: false,
    durationMs: 0,
  };
  try {
    if (run.aborted?.kind === 'not-due') throw notDueError(run.aborted);
    if (run.aborted)
      throw new LeaseUnavailableError('lease acquired too late to start the task safely', 'E_LEASE_LATE');
    end.started = lease.taskStarted = true;
    end.value = await lease.task({
      signal: run.controller.signal,
      deadline: lease.keeper,
      fenceToken: held.generation,
      idempotencyKey: `${opts.name}:${w ? w.key : held.generation}`,
      owner: held.owner,
      window: w?.key,
      attempt,
      scheduledAt: w?.scheduledAt,
    });
    // Only an uninterrupted task counts: one stopped early (even if it then returned
    // normally) may have done part of the work, and the window stays open for a retry.
    end.ok = run.aborted === undefined;
  } catch (err) {
    end.error = err;
  } finally {
    clearTimeout(runtimeTimer);
    lease.current = undefined;
  }
  end.aborted = run.aborted;
  end.durationMs = monoNow() - startedMono;
  return end;
}

/**
 * The window's outcome recorded while the lease is held (retried while it lasts), with one exit
 * code in the ledger, its event and leasejob's exit (stoppedExitCode). The lease's one window's
 * finish also releases it.
 */
async function recordWindow<T>(
  lease: Lease<T>,
  w: SequenceWindow | undefined,
  ran: TaskEnd<T>,
  at: At | undefined,
  log: Logger,
  retrying = false,
): Promise<WindowEnded<T>> {
  const { store, opts, held, keeper } = lease;
  const one = lease.finishReleases;
  // This finish releases the lease: nothing more to renew.
  if (one) keeper.stop();
  if (ran.started && w) await recordOutput(store, opts, w.key, held.generation, lease.eventTimeoutMs, log);
  const exitCode = ran.ok ? 0 : (stoppedExitCode(ran.aborted) ?? exitCodeOf(ran.error));
  const outcome = !w ? 'none' : ran.ok ? 'completed' : ran.aborted?.kind === 'replaced' ? 'replaced' : 'failed';
  const finisher = one
    ? store
    : { finish: store.finishWindow!.bind(store), isTransient: store.isTransient?.bind(store) };
  const tellEnd = async (result: RunResult<T>, o: 'completed' | 'failed' | 'lost'): Promise<void> => {
    if (at)
      await lease.tell({
        phase: 'end',
        ...at,
        outcome: o,
        attempt: ran.attempt,
        durationMs: ran.durationMs,
        exitCode,
        error: ran.error,
        result,
      });
  };
  let held_: boolean;
  try {
    const r = await finishWithRetry(
      finisher,
      {
        job: opts.name,
        owner: held.owner,
        generation: held.generation,
        window: w?.key,
        outcome,
        hostTime: new Date(),
        exitCode,
        detail: finishDetail(ran.attempt, ran.durationMs, ran.aborted?.kind, one ? keeper.offsetToRecord() : undefined),
      },
      () => keeper.remainingMs(),
      log,
      opts.signal,
    );
    held_ = r.held;
  } catch (err) {
    const result = unrecorded(lease, ran, err, log);
    await tellEnd(result, 'lost');
    return { result, last: true };
  }
  if (!held_) {
    lease.end = 'not-held';
    log.warn({ generation: held.generation }, 'lease was no longer held at finish; outcome not recorded');
    const result = notHeldAtFinish(lease, ran);
    await tellEnd(result, 'lost');
    return { result, last: true };
  }
  if (one) lease.end = 'released';
  logOutcome(log, w, ran, exitCode, held.generation, w?.rerun ? undefined : opts.maxAttempts, retrying);
  if (one) log.info({ generation: held.generation }, 'lease released');
  const result: RunResult<T> = ran.ok
    ? { status: 'completed', value: ran.value as T, generation: held.generation, attempt: ran.attempt }
    : failed(lease, ran.error ?? new Error('task aborted'), ran.attempt, ran.aborted, one);
  await tellEnd(result, outcome === 'completed' ? 'completed' : 'failed');
  return { result, last: !ran.ok && isLastAfterFailure(lease, at) };
}

/**
 * Whether this run tries the failed window again (--retries), as runWindow then decides, the
 * budget included: a try the run retries is no failure to report yet.
 */
function retriedHere<T>(
  lease: Lease<T>,
  w: SequenceWindow | undefined,
  at: At | undefined,
  tries: number,
  ran: TaskEnd<T>,
): boolean {
  if (!w || !at || ran.ok || noRetry(lease.opts, tries, ran) !== undefined) return false;
  const max = w.rerun ? undefined : lease.opts.maxAttempts;
  return max === undefined || ran.attempt < Math.abs(max);
}

/**
 * A failure is said at warn once no try is left for the occurrence (a crontab at --log-level
 * warn mails what reaches stderr): a try this run retries, or one that leaves --max-attempts
 * for a later trigger or another host, is said at info, so a failure that a retry then mends
 * mails nothing, and one that is final mails once.
 */
function logOutcome<T>(
  log: Logger,
  w: SequenceWindow | undefined,
  ran: TaskEnd<T>,
  exitCode: number | undefined,
  generation: string,
  maxAttempts: number | undefined,
  retrying: boolean,
): void {
  const aborted = ran.aborted ? { aborted: ran.aborted.kind } : {};
  const outcome = ran.ok ? 'completed' : ran.aborted?.kind === 'replaced' ? 'replaced' : 'failed';
  const open = { generation, attempt: ran.attempt, outcome, exitCode, ...aborted };
  if (w && ran.ok) log.info({ generation, attempt: ran.attempt, outcome }, 'window completed');
  else if (w && retrying) log.info({ ...open, triesLeft: true }, 'window left open');
  else if (w && maxAttempts !== undefined && maxAttempts < 0 && (!ran.aborted || ran.aborted.kind === 'max-runtime'))
    // run's default budget (no --retries or --max-attempts): one failure closes the occurrence.
    log.warn(
      { generation, attempt: ran.attempt, outcome, exitCode },
      'window failed: once per occurrence, later triggers skip it (--retries or --max-attempts to try again; run --rerun runs it)',
    );
  else if (w && maxAttempts !== undefined && maxAttempts > 0 && ran.attempt >= maxAttempts)
    log.warn(
      { generation, attempt: ran.attempt, maxAttempts, outcome: 'exhausted', exitCode, ...aborted },
      'window failed its last attempt (--max-attempts): exhausted; later triggers skip it until run --rerun or leasejob mark',
    );
  // Attempts left for a later trigger (this host's or another's): check reports it if none comes.
  else if (w && maxAttempts !== undefined && maxAttempts > 0)
    log.info({ ...open, maxAttempts, triesLeft: true }, 'window left open');
  else if (w) log.warn(open, 'window left open');
  else if (!ran.ok) log.warn({ generation, exitCode, ...aborted }, 'run failed');
}

/** After a failed window: the sequence stops (the later windows stay open) unless --keep-going. */
function isLastAfterFailure<T>(lease: Lease<T>, at: At | undefined): boolean {
  if (lease.windows.kind === 'one' || !at) return true;
  const stopped = lease.stopped;
  if (lease.windows.sequence.keepGoing && !stopped) return false;
  const left = at.total - at.index - 1;
  if (left > 0) {
    if (stopped)
      lease.log.info({ left, stoppedBy: stopped.kind }, 'stopped: the later windows stay open for the next run');
    else lease.log.info({ left }, 'a window failed: the later windows stay open for the next run');
  }
  return true;
}

/** The finish got no answer or failed: whether the outcome was recorded is not known. */
function unrecorded<T>(lease: Lease<T>, ran: TaskEnd<T>, err: unknown, log: Logger): RunResult<T> {
  lease.end = 'unknown';
  // A transient error (no answer, a reset) leaves the outcome unknown; any other means the
  // statement failed, and nothing was recorded.
  log.error(
    { err: (err as Error).message, generation: lease.held.generation },
    isTransient(lease.store, err)
      ? 'could not learn whether the outcome was recorded; if it was not, the lease expires by itself'
      : 'could not record outcome; the lease expires by itself',
  );
  // Told to stop while the outcome was being recorded: that signal is the exit's reason.
  const signal = lease.opts.signal;
  const cancelled: AbortReason | undefined =
    ran.ok && signal?.aborted ? { kind: 'cancelled', reason: signal.reason, graceMs: 0 } : undefined;
  return failed(
    lease,
    ran.ok ? err : (ran.error ?? new Error('task aborted')),
    ran.attempt,
    ran.aborted ?? cancelled,
    false,
  );
}

/**
 * The lease was gone when the outcome came to be recorded (taken over, released by an admin,
 * expired while the task was stopped for it): whatever the task said, this window lost its lease.
 */
function notHeldAtFinish<T>(lease: Lease<T>, ran: TaskEnd<T>): RunResult<T> {
  if (doubtful(ran.aborted))
    return failed(lease, ran.error ?? new Error('task aborted'), ran.attempt, ran.aborted, false);
  const aborted: AbortReason = { kind: 'lease-lost', detail: 'not held at finish', graceMs: 0 };
  const error = ran.error ?? new LeaseUnavailableError('lease lost before the outcome could be recorded');
  return failed(lease, error, ran.attempt, aborted, false);
}

function failed<T>(
  lease: Lease<T>,
  error: unknown,
  attempt: number,
  aborted: AbortReason | undefined,
  released: boolean,
): RunResult<T> {
  return {
    status: 'failed',
    error,
    generation: lease.held.generation,
    attempt,
    ...(aborted ? { aborted } : {}),
    released,
  };
}

const lost = <T>(lease: Lease<T>, detail: string): RunResult<T> =>
  failed(
    lease,
    new LeaseUnavailableError(`lease lost: ${detail}`),
    1,
    { kind: 'lease-lost', detail, graceMs: 0 },
    false,
  );

/** A sequence's lease given back after its last window, retried while the lease lasts. */
async function releaseLease<T>(lease: Lease<T>): Promise<void> {
  const { held, log } = lease;
  try {
    const r = await finishWithRetry(
      lease.store,
      {
        job: lease.opts.name,
        owner: held.owner,
        generation: held.generation,
        outcome: 'none',
        hostTime: new Date(),
        detail: finishDetail(1, monoNow() - lease.startedMono, lease.stopped?.kind, lease.keeper.offsetToRecord()),
      },
      () => lease.keeper.remainingMs(),
      log,
      lease.opts.signal,
    );
    lease.end = r.held ? 'released' : 'not-held';
    if (r.held) log.info({ generation: held.generation }, 'lease released');
    else log.warn({ generation: held.generation }, 'lease was no longer held at finish; outcome not recorded');
  } catch (err) {
    lease.end = 'unknown';
    log.error(
      { err: (err as Error).message, generation: held.generation },
      'could not record outcome; the lease expires by itself',
    );
  }
}

/**
 * A task stopped because the lease could not be kept: the evidence (finish.ts recordLoss), once
 * the lease's end is known, bounded, and cut short by a signal.
 */
async function recordLeaseLoss<T>(lease: Lease<T>): Promise<void> {
  if (!doubtful(lease.stopped) || !lease.taskStarted) return;
  const { held, opts } = lease;
  const window = lease.windows.kind === 'one' ? lease.windows.window?.key : undefined;
  await unlessAborted(
    recordLoss(
      lease.store,
      { job: opts.name, window, owner: held.owner, generation: held.generation },
      lease.end === 'released' ? lease.stopped : undefined,
      lease.keeper.renewFailures(),
      lease.eventTimeoutMs,
    ),
    opts.signal,
  );
}

/**
 * A sequence's result: its first failure (a signal's stop or a lost lease are failures too),
 * else its last completed window, else nothing was to run.
 */
function sequenceResult<T>(lease: Lease<T>, results: RunResult<T>[]): RunResult<T> {
  const released = lease.end === 'released';
  const stopped = lease.stopped;
  const firstFailure =
    results.find((r) => r.status === 'failed') ??
    (lease.end === 'not-held' && !doubtful(stopped) ? lost(lease, 'not held at the release') : undefined);
  if (firstFailure?.status === 'failed') return { ...firstFailure, released };
  if (stopped?.kind === 'cancelled') return { status: 'skipped', reason: 'cancelled' };
  if (stopped) {
    const detail = 'detail' in stopped ? stopped.detail : stopped.kind;
    return failed(lease, new LeaseUnavailableError(`lease lost: ${detail}`), 1, stopped, released);
  }
  const completed = results.filter((r) => r.status === 'completed');
  return completed.at(-1) ?? { status: 'skipped', reason: 'done' };
}
