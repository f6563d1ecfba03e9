// runWithLease: acquire the lease and claim the window, run a task while the keeper renews,
// stop the task when the lease is in doubt, record the outcome and release.
//
// A run goes through these states, in this order (any may end it):
//   waiting   acquire() is polled until the lease is ours, busy (--on-busy), done, missed or
//             paused; a stale holder is waited out (acquire.ts: acquireOrAdopt, give-backs)
//   held      the task runs while the keeper renews every TTL/3 (runHeld, keeper.ts); a
//             sequence of windows under one lease is runSequenceHeld (sequence.ts)
//   stopping  the lease is in doubt, lost, past --max-runtime or a signal came: the task is
//             told through its AbortSignal, with the grace it has (keeper.ts: stopAfterMs)
//   lost      a renewal found the lease taken: the task is stopped at once, the loss recorded
//   finished  the outcome is recorded and the lease released, retried while the lease lasts
//             (finish.ts: finishWithRetry); the exit code follows one rule (stoppedExitCode)
import { hostname } from 'node:os';
import { MAX_AHEAD_MS, measureOffset, monoNow, offsetIsLarge, sleep, stamp, type OffsetMeasurement } from '../clock.js';
import { LeaseUnavailableError, UsageError } from '../errors.js';
import { keepRunLease, startRunLease, stopAfterMs } from './keeper.js';
import type { Logger } from '../log.js';
import { runSequenceHeld } from './sequence.js';
import type { AbortReason, RunOptions, RunResult, TaskContext } from './types.js';
import { EVENT_TIMEOUT_MS, isTransient, type AcquireRow, type LeaseStore as Store } from '../store/contract.js';
import {
  ACQUIRE_ANSWER_LIMIT_MS,
  FIRST_ACQUIRE_MIN_MS,
  unlessAborted,
  ABANDON_ANSWER_MS,
  GIVE_UP_SETTLE_MS,
  SIGNALLED_SETTLE_MS,
  SIGNALLED_ABANDON_MS,
  acquireOrAdopt,
  abandonUnanswered,
} from './acquire.js';
import { recordLoss, recordOutput, finishWithRetry, finishDetail, stoppedExitCode, exitCodeOf } from './finish.js';

/**
 * host:pid:nonce. The nonce tells apart two processes with one host name and pid (a container's
 * pid 1 after a restart). It identifies, it grants nothing (the fence is the generation), so
 * Math.random, which V8 seeds from the OS at every start, rather than node:crypto, whose loading
 * costs every start about 7 M instructions (scripts/bundle.mjs).
 */
export function newOwnerId(): string {
  const nonce = Math.floor(Math.random() * 0x1_0000_0000)
    .toString(16)
    .padStart(8, '0');
  return `${hostname()}:${process.pid}:${nonce}`;
}

export async function runWithLease<T>(
  store: Store,
  opts: RunOptions,
  task: (ctx: TaskContext) => Promise<T>,
  log: Logger,
): Promise<RunResult<T>> {
  const owner = opts.owner ?? newOwnerId();
  // A lease held under this owner can only be this call's when the owner is this call's alone.
  const ownerIsOurs = opts.owner === undefined;
  /** Set once an acquire of this call went unanswered (it may have committed). */
  let unanswered = false;
  const renewIntervalMs = opts.renewIntervalMs ?? Math.floor(opts.ttlMs / 3);
  const timing = { ttlMs: opts.ttlMs, renewIntervalMs, killGraceMs: opts.killGraceMs };
  if (opts.sequence && !(store.claimWindow && store.finishWindow && store.recordMissed && store.readWindows)) {
    throw new UsageError(
      `this store (${store.kind}) cannot run a sequence of windows under one lease (catch-up, backfill)`,
    );
  }
  // A sequence claims its windows once the lease is held.
  const win = opts.sequence ? undefined : opts.window;
  const jlog = log.child({ job: opts.name, ...(win ? { window: win.key } : {}), owner });
  const waitStart = monoNow();

  /** Set once the run waits (a stale owner's expiry, --on-busy wait); when the database first failed meanwhile. */
  let waiting = false;
  let saidWaiting = false;
  let failingSince: number | undefined;
  /** What --wait-timeout leaves at `now` (with --on-busy wait; else no bound). */
  const waitLeftMs = (now = monoNow()): number =>
    opts.onBusy === 'wait' && opts.waitTimeoutMs !== undefined ? opts.waitTimeoutMs - (now - waitStart) : Infinity;
  const waitedMs = (): number => Math.round(monoNow() - waitStart);
  /** Set as the lease is taken (from then on, runHeld records and releases). */
  let taken = false;
  let signalled = false;
  try {
    for (;;) {
      if (opts.signal?.aborted) return { status: 'skipped', reason: 'cancelled' };
      const sent = stamp();
      let row: (AcquireRow & { adopted?: true }) | undefined;
      const pending = acquireOrAdopt(
        store,
        {
          job: opts.name,
          owner,
          ttlMs: opts.ttlMs,
          renewIntervalMs,
          window: win?.key,
          scheduledAt: win?.scheduledAt,
          rerun: win?.rerun ?? false,
          maxDelayMs: win?.maxDelayMs,
          hostTime: new Date(sent.wall),
          spec: opts.spec,
          // With --on-busy wait, never past --wait-timeout once waiting (at least a short round trip).
          answerTimeoutMs: Math.min(
            stopAfterMs(timing),
            ACQUIRE_ANSWER_LIMIT_MS,
            Math.max(waiting ? 250 : FIRST_ACQUIRE_MIN_MS, waitLeftMs(sent.mono)),
          ),
        },
        ownerIsOurs && unanswered,
      );
      try {
        row = await unlessAborted(pending, opts.signal);
        failingSince = undefined;
      } catch (err) {
        // Once waiting, a database that restarts or drops the connection is waited out too: for
        // up to one TTL (a running child tolerates about as much) and within --wait-timeout. The
        // outage is counted from when the failed attempt was sent, its wait included.
        const now = monoNow();
        failingSince ??= sent.mono;
        const waitLeft = waitLeftMs(now);
        const left = Math.min(opts.ttlMs - (now - failingSince), waitLeft);
        const transient = isTransient(store, err);
        // A statement sent that got no answer (timed out, connection lost) may have committed;
        // one whose connection never opened (refused, too many connections) was never sent.
        if (transient && (err as { statementSent?: boolean }).statementSent !== false) unanswered = true;
        if (!waiting || !transient || waitLeft <= 0 || left <= 0) {
          if (waiting && transient && waitLeft <= 0) {
            throw new LeaseUnavailableError(
              `lease "${opts.name}" not acquired within --wait-timeout (${waitedMs()} ms): the database was unavailable (${(err as Error).message})`,
              'E_WAIT_TIMEOUT',
            );
          }
          throw err;
        }
        jlog.warn(
          { err: (err as Error).message, retryInMs: Math.round(Math.min(1_000, left)) },
          'database unavailable while waiting; retrying',
        );
        await sleep(Math.min(1_000, left), opts.signal);
        continue;
      }
      if (row === undefined) {
        // A lease granted meanwhile is given back (below): the acquire in flight may still settle
        // for a moment; answered, it says whether there is anything to give back. Failing that,
        // the lease is held by a session that closes as we exit: contenders see it stale and
        // take over once it expires.
        jlog.info('signal received while waiting for the database');
        signalled = true;
        let settle: NodeJS.Timeout | undefined;
        const settled = await Promise.race([
          pending.then(
            (r) => r,
            () => undefined,
          ),
          new Promise<undefined>((resolve) => (settle = setTimeout(() => resolve(undefined), SIGNALLED_SETTLE_MS))),
        ]);
        clearTimeout(settle);
        if (settled === undefined || settled.outcome === 'acquired') unanswered = true;
        return { status: 'skipped', reason: 'cancelled' };
      }
      const received = stamp();

      // Versions, not last-write-wins: this run's settings replaced a registered schedule's.
      if (row.jobChanged) {
        jlog.warn(
          { old: row.jobChanged.old, new: row.jobChanged.new, version: row.jobChanged.version },
          'job settings differ from the registry; adopted (a job-changed event records it: if the hosts disagree, align their flags)',
        );
      }
      if (row.outcome === 'paused') {
        jlog.info('job paused (leasejob pause): occurrence skipped, command not started');
        return { status: 'skipped', reason: 'paused' };
      }
      if (row.outcome === 'done') {
        jlog.info({ completedAt: row.completedAt }, 'window already completed');
        // Evidence like a busy skip (an event, so a counter): a late duplicate, a retry of a run
        // that did finish, or a second host's cron. Best effort: the skip stands either way.
        await unlessAborted(
          store
            .recordEvent({
              job: opts.name,
              kind: 'done-skip',
              window: win?.key,
              owner,
              hostTime: new Date(),
              detail: { completed_at: row.completedAt?.toISOString() },
            })
            .catch((err: unknown) => jlog.debug({ err: (err as Error).message }, 'could not record done-skip event')),
          opts.signal,
        );
        return { status: 'skipped', reason: 'done', completedAt: row.completedAt };
      }
      if (row.outcome === 'missed') {
        jlog.warn({ scheduledAt: win?.scheduledAt, maxDelayMs: win?.maxDelayMs }, 'window missed');
        return { status: 'skipped', reason: 'missed' };
      }
      if (row.outcome === 'acquired' && row.generation !== null) {
        const offset = row.dbNow ? measureOffset(sent, received, row.dbNow) : undefined;
        jlog.info(
          {
            generation: row.generation,
            attempt: row.attempt,
            ttlMs: opts.ttlMs,
            ...offset,
            ...(row.adopted ? { adopted: true } : {}),
          },
          'lease acquired',
        );
        if (offset && offsetIsLarge(offset)) jlog.warn(offset, 'clock offset to database is large');
        if (win)
          jlog.info(
            { generation: row.generation, attempt: row.attempt, scheduledAt: win.scheduledAt },
            'window claimed',
          );
        taken = true;
        if (opts.sequence)
          return runSequenceHeld(store, { ...opts, sequence: opts.sequence }, task, jlog, {
            owner,
            generation: row.generation,
            sent,
            timing,
            offset,
            dbNow: row.dbNow ?? undefined,
            received,
          });
        return runHeld(store, opts, task, jlog, {
          owner,
          generation: row.generation,
          attempt: row.attempt ?? 1,
          sent,
          timing,
          offset,
          dbNow: row.dbNow ?? undefined,
        });
      }

      // Busy. A stale holder (stopped renewing, or its database session is gone) is waited out
      // and taken over whatever --on-busy says (skipping would leave its window unfinished), but
      // with --on-busy wait not past --wait-timeout.
      const holder = {
        holder: row.holder,
        holderGeneration: row.holderGeneration,
        holderWindow: row.holderWindow,
        expiresAt: row.expiresAt,
      };
      const untilExpiryMs =
        row.expiresAt && row.dbNow ? row.expiresAt.getTime() - row.dbNow.getTime() : renewIntervalMs;
      if (row.outcome === 'stale') {
        // --on-busy wait with --wait-timeout: never past the timeout, a stale holder included.
        const waitLeft = waitLeftMs();
        if (waitLeft <= 0) {
          throw new LeaseUnavailableError(
            `lease "${opts.name}" still held by a stale owner (${row.holder}) after waiting ${waitedMs()} ms (--wait-timeout)`,
            'E_WAIT_TIMEOUT',
          );
        }
        const waitMs = Math.min(Math.max(untilExpiryMs, 0) + 50, opts.ttlMs, Math.max(50, waitLeft));
        jlog.info({ ...holder, waitMs, expiresInMs: untilExpiryMs }, 'lease held by a stale owner, waiting for expiry');
        waiting = true;
        await sleep(waitMs, opts.signal);
        continue;
      }
      const policy = opts.onBusy ?? 'skip';
      if (policy === 'skip') {
        jlog.info(holder, 'lease busy');
        await unlessAborted(
          store
            .recordEvent({
              job: opts.name,
              kind: 'busy-skip',
              window: win?.key,
              owner,
              hostTime: new Date(),
              detail: { holder: row.holder, holder_generation: row.holderGeneration, holder_window: row.holderWindow },
            })
            .catch((err: unknown) => jlog.debug({ err: (err as Error).message }, 'could not record busy-skip event')),
          opts.signal,
        );
        return { status: 'skipped', reason: 'busy', holder: row.holder };
      }
      if (policy === 'fail') {
        throw new LeaseUnavailableError(
          `lease "${opts.name}" is held by ${row.holder} (generation ${row.holderGeneration}) and --on-busy is fail`,
          'E_LEASE_BUSY',
        );
      }
      const remaining = waitLeftMs();
      if (remaining <= 0) {
        throw new LeaseUnavailableError(
          `lease "${opts.name}" still held by ${row.holder} after waiting ${waitedMs()} ms (--wait-timeout)`,
          'E_WAIT_TIMEOUT',
        );
      }
      // Said once at info (an operator sees why nothing happens), then at each poll at debug.
      jlog[saidWaiting ? 'debug' : 'info'](holder, 'lease busy, waiting');
      saidWaiting = true;
      waiting = true;
      // Poll at most once a second, never past the holder's expiry or our own timeout.
      await sleep(Math.max(50, Math.min(1_000, untilExpiryMs + 50, remaining)), opts.signal);
    }
  } finally {
    // Leaving without the lease (given up, skipped, signalled, missed) after an acquire of this
    // call went unanswered: it may have committed; give that lease back.
    if (!taken && unanswered && ownerIsOurs) {
      if (!signalled) await sleep(GIVE_UP_SETTLE_MS);
      await abandonUnanswered(store, opts.name, owner, jlog, signalled ? SIGNALLED_ABANDON_MS : ABANDON_ANSWER_MS);
    }
  }
}

async function runHeld<T>(
  store: Store,
  opts: RunOptions,
  task: (ctx: TaskContext) => Promise<T>,
  log: Logger,
  held: {
    owner: string;
    generation: string;
    attempt: number;
    sent: ReturnType<typeof stamp>;
    timing: { ttlMs: number; renewIntervalMs: number; killGraceMs: number };
    offset: OffsetMeasurement | undefined;
    dbNow?: Date | undefined;
  },
): Promise<RunResult<T>> {
  const { owner, generation, attempt } = held;
  const win = opts.window;
  const controller = new AbortController();
  let aborted: AbortReason | undefined;
  const abort = (reason: AbortReason): void => {
    if (aborted) return;
    aborted = reason;
    controller.abort(reason);
  };

  // The runner keeps one connection (a second opens only while one is stuck): an event whose
  // connection went silent must free it well before the next renewal needs it.
  const eventTimeoutMs = Math.min(EVENT_TIMEOUT_MS, held.timing.renewIntervalMs / 2);
  const keeper = keepRunLease(
    store,
    { job: opts.name, owner, generation, window: win?.key },
    held.timing,
    held.sent,
    log,
    eventTimeoutMs,
    abort,
  );
  const startedMono = monoNow();
  const unwire = startRunLease(keeper, held, opts, abort, log);

  let runtimeTimer: NodeJS.Timeout | undefined;
  if (opts.maxRuntimeMs !== undefined) {
    runtimeTimer = setTimeout(() => {
      log.warn({ maxRuntimeMs: opts.maxRuntimeMs }, 'max runtime exceeded');
      abort({ kind: 'max-runtime', graceMs: opts.killGraceMs });
    }, opts.maxRuntimeMs);
  }

  // An occurrence the database clock says has not come yet: the clock that named it runs ahead
  // (a crontab host's, or a Job named by hand). Run now, its window would be done before its
  // time and the run that comes at that time would find it done. The window is left open for it.
  const aheadMs =
    win?.scheduledAt !== undefined && held.dbNow !== undefined ? win.scheduledAt.getTime() - held.dbNow.getTime() : 0;
  if (!aborted && aheadMs > MAX_AHEAD_MS) {
    const detail = `occurrence ${win!.scheduledAt!.toISOString()} is ${Math.round(aheadMs / 1000)} s ahead of the database clock (${held.dbNow!.toISOString()})`;
    log.error(
      { generation, scheduledAt: win!.scheduledAt, dbNow: held.dbNow, aheadMs: Math.round(aheadMs) },
      'occurrence not due by the database clock: not started, window left open',
    );
    abort({ kind: 'not-due', detail, graceMs: 0 });
  }

  const idempotencyKey = win ? `${opts.name}:${win.key}` : `${opts.name}:${generation}`;
  let value: T | undefined;
  let error: unknown;
  let ok = false;
  let taskStarted = false;
  try {
    if (aborted?.kind === 'not-due')
      throw new LeaseUnavailableError(`not started: ${aborted.detail}; check this host's clock (NTP)`, 'E_NOT_DUE');
    if (aborted) throw new LeaseUnavailableError('lease acquired too late to start the task safely', 'E_LEASE_LATE');
    taskStarted = true;
    value = await task({
      signal: controller.signal,
      fenceToken: generation,
      idempotencyKey,
      owner,
      window: win?.key,
      attempt,
      scheduledAt: win?.scheduledAt,
    });
    // Only an uninterrupted task counts: one stopped early (even if it then returned
    // normally) may have done part of the work, and the window stays open for a retry.
    ok = aborted === undefined;
  } catch (err) {
    error = err;
  } finally {
    clearTimeout(runtimeTimer);
    unwire();
  }
  const leaseDoubtful = aborted?.kind === 'lease-lost' || aborted?.kind === 'deadline';
  keeper.stop();

  const outcome = !win ? 'none' : ok ? 'completed' : 'failed';
  if (taskStarted && win) await recordOutput(store, opts, win.key, generation, eventTimeoutMs, log);
  // One code per run, in the ledger, its event and leasejob's exit (src/commands/run.ts).
  const exitCode = ok ? 0 : (stoppedExitCode(aborted) ?? exitCodeOf(error));
  let released = false;
  try {
    const r = await finishWithRetry(
      store,
      {
        job: opts.name,
        owner,
        generation,
        window: win?.key,
        outcome,
        hostTime: new Date(),
        exitCode,
        detail: finishDetail(attempt, monoNow() - startedMono, aborted?.kind, keeper.offsetToRecord()),
      },
      () => keeper.remainingMs(),
      log,
      opts.signal,
    );
    released = r.held;
    if (r.held) {
      // A failure is said at warn (crontab mails what reaches stderr at --log-level warn).
      if (win && ok) log.info({ generation, attempt, outcome }, 'window completed');
      else if (win)
        log.warn(
          { generation, attempt, outcome, exitCode, ...(aborted ? { aborted: aborted.kind } : {}) },
          'window left open',
        );
      else if (!ok) log.warn({ generation, exitCode, ...(aborted ? { aborted: aborted.kind } : {}) }, 'run failed');
      log.info({ generation }, 'lease released');
    } else {
      log.warn({ generation }, 'lease was no longer held at finish; outcome not recorded');
    }
    if (leaseDoubtful && taskStarted) {
      // Not held: the finish recorded the loss itself (on every schema version).
      await unlessAborted(
        recordLoss(
          store,
          { job: opts.name, window: win?.key, owner, generation },
          r.held ? aborted : undefined,
          keeper.renewFailures(),
          eventTimeoutMs,
        ),
        opts.signal,
      );
    }
    if (!r.held && !leaseDoubtful) {
      // The lease was gone when we came to record the outcome (taken over, released by an
      // admin): whatever the task said, this run lost its lease.
      return {
        status: 'failed',
        error: error ?? new LeaseUnavailableError('lease lost before the outcome could be recorded'),
        generation,
        attempt,
        aborted: { kind: 'lease-lost', detail: 'not held at finish', graceMs: 0 },
        released,
      };
    }
  } catch (err) {
    // A transient error (no answer, a reset) leaves the outcome unknown; any other means the
    // statement failed, and nothing was recorded.
    log.error(
      { err: (err as Error).message, generation },
      isTransient(store, err)
        ? 'could not learn whether the outcome was recorded; if it was not, the lease expires by itself'
        : 'could not record outcome; the lease expires by itself',
    );
    if (ok && !leaseDoubtful) {
      // Told to stop while the outcome was being recorded: that signal is the exit's reason.
      const stopped = opts.signal?.aborted
        ? { aborted: { kind: 'cancelled' as const, reason: opts.signal.reason, graceMs: 0 } }
        : {};
      return { status: 'failed', error: err, generation, attempt, released: false, ...stopped };
    }
  }

  if (ok) return { status: 'completed', value: value as T, generation, attempt };
  return {
    status: 'failed',
    error: error ?? new Error('task aborted'),
    generation,
    attempt,
    ...(aborted ? { aborted } : {}),
    released,
  };
}
