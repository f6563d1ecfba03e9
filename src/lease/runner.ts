// runWithLease: acquire the lease and claim the window, run a task while the keeper renews,
// stop the task when the lease is in doubt, record the outcome and release.
//
// A run goes through these states, in this order (any may end it):
//   waiting   acquire() is polled until the lease is ours, busy (--on-busy), done, missed or
//             paused; a stale holder is waited out (acquire.ts: acquireOrAdopt, give-backs)
//   held      each window's task runs while the keeper renews every TTL/3 (windows.ts:
//             runWindows, keeper.ts); a single run is a sequence of one window
//   stopping  the lease is in doubt, lost, past --max-runtime or a signal came: the task is
//             told through its AbortSignal, with the grace it has (keeper.ts: stopAfterMs)
//   lost      a renewal found the lease taken: the task is stopped at once, the loss recorded
//   finished  the outcome is recorded and the lease released, retried while the lease lasts
//             (finish.ts: finishWithRetry); the exit code follows one rule (stoppedExitCode)
import { measureOffset, monoNow, offsetIsLarge, sleep, stamp, type Stamp } from '../clock.js';
import { LeaseUnavailableError, UsageError } from '../errors.js';
import { hostName } from '../host-name.js';
import { stopAfterMs, type LeaseTiming } from './keeper.js';
import type { Logger } from '../log.js';
import { budgetSkip } from './attempts.js';
import {
  UNCONFIRMED_MESSAGE,
  unconfirmedFields,
  watchLease,
  watchPollMs,
  watchedLongEnough,
  type LeaseWatch,
} from './two-clock.js';
import { runWindows, type Held, type Windows } from './windows.js';
import type { RunOptions, RunResult, TaskContext, WindowClaim } from './types.js';
import { isTransient, type AcquireInput, type AcquireRow, type LeaseStore as Store } from '../store/contract.js';
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
  return `${hostName()}:${process.pid}:${nonce}`;
}

/** A runWithLease call while it waits for the lease. */
interface Acquiring {
  store: Store;
  opts: RunOptions;
  log: Logger;
  owner: string;
  /** A lease held under this owner can only be this call's when the owner is this call's alone. */
  ownerIsOurs: boolean;
  /** The window the acquire claims (a sequence claims its windows once the lease is held). */
  win: WindowClaim | undefined;
  timing: LeaseTiming;
  waitStart: number;
  /** Set once the run waits (a stale owner's expiry, --on-busy wait); when the database first failed meanwhile. */
  waiting: boolean;
  saidWaiting: boolean;
  failingSince: number | undefined;
  /** Set once an acquire of this call went unanswered (it may have committed). */
  unanswered: boolean;
  signalled: boolean;
  /** Set as the lease is taken (from then on, runWindows records and releases). */
  taken: boolean;
  /** An `unconfirmed` lease being watched on this host's monotonic clock (two-clock.ts). */
  watch: LeaseWatch | undefined;
}

export async function runWithLease<T>(
  store: Store,
  opts: RunOptions,
  task: (ctx: TaskContext) => Promise<T>,
  log: Logger,
): Promise<RunResult<T>> {
  if (opts.sequence && !(store.claimWindow && store.finishWindow && store.recordMissed && store.readWindows)) {
    throw new UsageError(
      `this store (${store.kind}) cannot run a sequence of windows under one lease (catch-up, backfill)`,
    );
  }
  const a = acquiring(store, opts, log);
  try {
    for (;;) {
      if (opts.signal?.aborted) return { status: 'skipped', reason: 'cancelled' };
      const sent = stamp();
      const pending = acquireOrAdopt(store, acquireInput(a, sent), a.ownerIsOurs && a.unanswered);
      let row: (AcquireRow & { adopted?: true }) | undefined;
      try {
        row = await unlessAborted(pending, opts.signal);
        a.failingSince = undefined;
      } catch (err) {
        await waitOutOutage(a, err, sent);
        continue;
      }
      if (row === undefined) return await cancelledWhileAcquiring(a, pending);
      const received = stamp();
      // Versions, not last-write-wins: this run's settings replaced a registered schedule's.
      if (row.jobChanged) {
        a.log.warn(
          { old: row.jobChanged.old, new: row.jobChanged.new, version: row.jobChanged.version },
          'job settings differ from the registry; adopted (a job-changed event records it: if the hosts disagree, align their flags)',
        );
      }
      const skipped = await notToRun<T>(a, row);
      if (skipped) return skipped;
      if (row.outcome === 'acquired' && row.generation !== null) {
        a.taken = true;
        const held = heldLease(a, row, row.generation, sent, received);
        // A single run is a sequence of one window: the one the acquire claimed.
        const windows: Windows = opts.sequence
          ? { kind: 'sequence', sequence: opts.sequence }
          : { kind: 'one', window: a.win, attempt: row.attempt ?? 1 };
        return await runWindows(store, opts, task, a.log, held, windows);
      }
      a.watch = watchLease(a.watch, row, received.mono, a.opts.ttlMs);
      if (row.outcome === 'unconfirmed') {
        await waitUnconfirmed(a, row);
        continue;
      }
      const busy = await whenBusy<T>(a, row);
      if (busy) return busy;
    }
  } finally {
    await giveBackUnanswered(a);
  }
}

function acquiring(store: Store, opts: RunOptions, log: Logger): Acquiring {
  const owner = opts.owner ?? newOwnerId();
  const renewIntervalMs = opts.renewIntervalMs ?? Math.floor(opts.ttlMs / 3);
  const win = opts.sequence ? undefined : opts.window;
  return {
    store,
    opts,
    log: log.child({ job: opts.name, ...(win ? { window: win.key } : {}), owner }),
    owner,
    ownerIsOurs: opts.owner === undefined,
    win,
    timing: { ttlMs: opts.ttlMs, renewIntervalMs, killGraceMs: opts.killGraceMs },
    waitStart: monoNow(),
    waiting: false,
    saidWaiting: false,
    failingSince: undefined,
    unanswered: false,
    signalled: false,
    taken: false,
    watch: undefined,
  };
}

/** How long --on-busy replace waits for the holder to yield by default: a few TTLs. */
const REPLACE_WAIT_TTLS = 3;

/**
 * What --wait-timeout leaves at `now`: with --on-busy wait (else no bound), and with --on-busy
 * replace (by default REPLACE_WAIT_TTLS TTLs: a holder that yields does so within one TTL).
 */
function waitLeftMs(a: Acquiring, now = monoNow()): number {
  const { onBusy, waitTimeoutMs, ttlMs } = a.opts;
  const bound = onBusy === 'replace' ? (waitTimeoutMs ?? REPLACE_WAIT_TTLS * ttlMs) : waitTimeoutMs;
  return (onBusy === 'wait' || onBusy === 'replace') && bound !== undefined ? bound - (now - a.waitStart) : Infinity;
}

const waitedMs = (a: Acquiring): number => Math.round(monoNow() - a.waitStart);

/** Which bound ran out, as said in the error: --wait-timeout, or replace's default. */
const waitBound = (a: Acquiring): string =>
  a.opts.onBusy === 'replace' && a.opts.waitTimeoutMs === undefined
    ? `(--on-busy replace waits ${REPLACE_WAIT_TTLS} TTLs unless --wait-timeout is given)`
    : '(--wait-timeout)';

function acquireInput(a: Acquiring, sent: Stamp): AcquireInput {
  const { opts, win } = a;
  return {
    job: opts.name,
    owner: a.owner,
    ttlMs: opts.ttlMs,
    renewIntervalMs: a.timing.renewIntervalMs,
    window: win?.key,
    scheduledAt: win?.scheduledAt,
    rerun: win?.rerun ?? false,
    maxDelayMs: win?.maxDelayMs,
    hostTime: new Date(sent.wall),
    spec: opts.spec,
    maxAttempts: win ? opts.maxAttempts : undefined,
    retryDelayMs: win ? opts.retryDelayMs : undefined,
    observed: watchedLongEnough(a.watch, sent.mono),
    // Not after an unanswered acquire: a busy answer may then be our own lease, to be adopted.
    recordSkips: a.unanswered ? undefined : { busy: (opts.onBusy ?? 'skip') === 'skip' },
    // With --on-busy wait, never past --wait-timeout once waiting (at least a short round trip).
    answerTimeoutMs: Math.min(
      stopAfterMs(a.timing),
      ACQUIRE_ANSWER_LIMIT_MS,
      Math.max(a.waiting ? 250 : FIRST_ACQUIRE_MIN_MS, waitLeftMs(a, sent.mono)),
    ),
  };
}

/**
 * Once waiting, a database that restarts or drops the connection is waited out too: for up to
 * one TTL (a running child tolerates about as much) and within --wait-timeout. The outage is
 * counted from when the failed attempt was sent, its wait included. Throws when not waited out.
 */
async function waitOutOutage(a: Acquiring, err: unknown, sent: Stamp): Promise<void> {
  const now = monoNow();
  a.failingSince ??= sent.mono;
  const waitLeft = waitLeftMs(a, now);
  const left = Math.min(a.opts.ttlMs - (now - a.failingSince), waitLeft);
  const transient = isTransient(a.store, err);
  // A statement sent that got no answer (timed out, connection lost) may have committed;
  // one whose connection never opened (refused, too many connections) was never sent.
  if (transient && (err as { statementSent?: boolean }).statementSent !== false) a.unanswered = true;
  if (!a.waiting || !transient || waitLeft <= 0 || left <= 0) {
    if (a.waiting && transient && waitLeft <= 0) {
      throw new LeaseUnavailableError(
        `lease "${a.opts.name}" not acquired within --wait-timeout (${waitedMs(a)} ms): the database ` +
          `was unavailable (${(err as Error).message})`,
        'E_WAIT_TIMEOUT',
      );
    }
    throw err;
  }
  a.log.warn(
    { err: (err as Error).message, retryInMs: Math.round(Math.min(1_000, left)) },
    'database unavailable while waiting; retrying',
  );
  await sleep(Math.min(1_000, left), a.opts.signal);
}

/**
 * A signal came while the acquire was in flight. A lease granted meanwhile is given back
 * (giveBackUnanswered): the acquire may still settle for a moment; answered, it says whether
 * there is anything to give back. Failing that, the lease is held by a session that closes as
 * we exit: contenders see it stale and take over once it expires.
 */
async function cancelledWhileAcquiring<T>(a: Acquiring, pending: Promise<AcquireRow>): Promise<RunResult<T>> {
  a.log.info('signal received while waiting for the database');
  a.signalled = true;
  let settle: NodeJS.Timeout | undefined;
  const settled = await Promise.race([
    pending.then(
      (r) => r,
      () => undefined,
    ),
    new Promise<undefined>((resolve) => (settle = setTimeout(() => resolve(undefined), SIGNALLED_SETTLE_MS))),
  ]);
  clearTimeout(settle);
  if (settled === undefined || settled.outcome === 'acquired') a.unanswered = true;
  return { status: 'skipped', reason: 'cancelled' };
}

/**
 * `unconfirmed`: expired on the database clock, the clocks disagreeing. Watched on this host's
 * monotonic clock (two-clock.ts), as a stale holder is waited out: whatever --on-busy says, and
 * with --on-busy wait not past --wait-timeout.
 */
async function waitUnconfirmed(a: Acquiring, row: AcquireRow): Promise<void> {
  const waitLeft = waitLeftMs(a);
  if (waitLeft <= 0) {
    throw new LeaseUnavailableError(
      `lease "${a.opts.name}" expired on the database clock, but the clocks disagree and its holder (${row.holder}) ` +
        `was not seen stopped within ${waitedMs(a)} ms ${waitBound(a)}`,
      'E_WAIT_TIMEOUT',
    );
  }
  const watch = a.watch;
  if (watch && !watch.told) {
    a.log.warn(unconfirmedFields(row, watch), UNCONFIRMED_MESSAGE);
    watch.told = true;
  }
  a.waiting = true;
  await sleep(Math.min(watch ? watchPollMs(watch, monoNow()) : 1_000, Math.max(50, waitLeft)), a.opts.signal);
}

/** Paused, done or missed: the run ends here, the command not started. */
async function notToRun<T>(a: Acquiring, row: AcquireRow): Promise<RunResult<T> | undefined> {
  const { win, log } = a;
  if (row.outcome === 'paused') {
    log.info('job paused (leasejob pause): occurrence skipped, command not started');
    return { status: 'skipped', reason: 'paused' };
  }
  if (row.outcome === 'done') {
    log.info({ completedAt: row.completedAt }, 'window already completed');
    // Evidence like a busy skip (an event, so a counter): a late duplicate, a retry of a run
    // that did finish, or a second host's cron. Best effort: the skip stands either way.
    if (!row.skipRecorded) await skipEvent(a, 'done-skip', { completed_at: row.completedAt?.toISOString() });
    return { status: 'skipped', reason: 'done', completedAt: row.completedAt };
  }
  if (row.outcome === 'missed') {
    log.warn({ scheduledAt: win?.scheduledAt, maxDelayMs: win?.maxDelayMs }, 'window missed');
    return { status: 'skipped', reason: 'missed' };
  }
  if (row.outcome === 'exhausted' || row.outcome === 'backoff') return budgetSkip(log, a.opts, row.outcome, row);
  return undefined;
}

/** A skip's event (done-skip, busy-skip), best effort, cut short by a signal. */
async function skipEvent(
  a: Acquiring,
  kind: 'done-skip' | 'busy-skip',
  detail: Record<string, unknown>,
): Promise<void> {
  const event = a.store
    .recordEvent({ job: a.opts.name, kind, window: a.win?.key, owner: a.owner, hostTime: new Date(), detail })
    .catch((err: unknown) =>
      a.log.debug(
        { err: (err as Error).message },
        kind === 'done-skip' ? 'could not record done-skip event' : 'could not record busy-skip event',
      ),
    );
  await unlessAborted(event, a.opts.signal);
}

/** The lease as acquired, said in the log with the clock offset the acquire measured. */
function heldLease(
  a: Acquiring,
  row: AcquireRow & { adopted?: true },
  generation: string,
  sent: Stamp,
  received: Stamp,
): Held {
  const offset = row.dbNow ? measureOffset(sent, received, row.dbNow) : undefined;
  a.log.info(
    { generation, attempt: row.attempt, ttlMs: a.opts.ttlMs, ...offset, ...(row.adopted ? { adopted: true } : {}) },
    'lease acquired',
  );
  if (offset && offsetIsLarge(offset)) a.log.warn(offset, 'clock offset to database is large');
  if (a.win) a.log.info({ generation, attempt: row.attempt, scheduledAt: a.win.scheduledAt }, 'window claimed');
  return { owner: a.owner, generation, sent, received, timing: a.timing, offset, dbNow: row.dbNow ?? undefined };
}

/**
 * Busy. A stale holder (stopped renewing, or its database session is gone) is waited out and
 * taken over whatever --on-busy says (skipping would leave its window unfinished), but with
 * --on-busy wait not past --wait-timeout. Undefined once waited: acquire again.
 */
async function whenBusy<T>(a: Acquiring, row: AcquireRow): Promise<RunResult<T> | undefined> {
  const { opts, log } = a;
  const holder = {
    holder: row.holder,
    holderGeneration: row.holderGeneration,
    holderWindow: row.holderWindow,
    expiresAt: row.expiresAt,
  };
  const untilExpiryMs =
    row.expiresAt && row.dbNow ? row.expiresAt.getTime() - row.dbNow.getTime() : a.timing.renewIntervalMs;
  if (row.outcome === 'stale') {
    // --on-busy wait with --wait-timeout: never past the timeout, a stale holder included.
    const waitLeft = waitLeftMs(a);
    if (waitLeft <= 0) {
      throw new LeaseUnavailableError(
        `lease "${opts.name}" still held by a stale owner (${row.holder}) after waiting ${waitedMs(a)} ms ${waitBound(a)}`,
        'E_WAIT_TIMEOUT',
      );
    }
    const waitMs = Math.min(Math.max(untilExpiryMs, 0) + 50, opts.ttlMs, Math.max(50, waitLeft));
    // Said once per wait: a trigger that waits out a dead holder's TTL says why and until when
    // (taking the lease before expiry is not safe: the holder's child may still run, cut off from
    // the database). At info, as every wait: a crontab at --log-level warn mails failures, and a
    // wait that ends in a run is none.
    const why = { ...holder, waitMs, expiresInMs: untilExpiryMs, holderGone: row.holderGone === true };
    if (row.holderGone) log.info(why, 'lease holder gone, waiting for its lease to expire');
    else log.info(why, 'lease held by a stale owner, waiting for expiry');
    a.waiting = true;
    await sleep(waitMs, opts.signal);
    return undefined;
  }
  let policy = opts.onBusy ?? 'skip';
  if (policy === 'replace') policy = await askToReplace(a, row);
  if (policy === 'skip') {
    log.info(holder, 'lease busy');
    // The occurrence it skipped, with its time: history --by-occurrence places one that has no
    // ledger row (only this skip) among the others by it.
    const scheduled = a.win?.scheduledAt ? { scheduled_at: a.win.scheduledAt.toISOString() } : {};
    const detail = { holder: row.holder, holder_generation: row.holderGeneration, holder_window: row.holderWindow };
    if (!row.skipRecorded) await skipEvent(a, 'busy-skip', { ...detail, ...scheduled });
    return { status: 'skipped', reason: 'busy', holder: row.holder };
  }
  if (policy === 'fail') {
    throw new LeaseUnavailableError(
      `lease "${opts.name}" is held by ${row.holder} (generation ${row.holderGeneration}) and --on-busy is fail`,
      'E_LEASE_BUSY',
    );
  }
  const remaining = waitLeftMs(a);
  if (remaining <= 0) {
    throw new LeaseUnavailableError(
      `lease "${opts.name}" still held by ${row.holder} after waiting ${waitedMs(a)} ms ${waitBound(a)}`,
      'E_WAIT_TIMEOUT',
    );
  }
  // Said once at info (an operator sees why nothing happens), then at each poll at debug.
  if (policy !== 'replace') log[a.saidWaiting ? 'debug' : 'info'](holder, 'lease busy, waiting');
  a.saidWaiting = true;
  a.waiting = true;
  // Poll at most once a second, never past the holder's expiry or our own timeout.
  await sleep(Math.max(50, Math.min(1_000, untilExpiryMs + 50, remaining)), opts.signal);
  return undefined;
}

/**
 * --on-busy replace: ask a live holder running an earlier occurrence to stop (through the lease
 * row; it yields at its next renewal), then wait for the lease as --on-busy wait does, bounded.
 * A holder of the same window, or of one not earlier, is never replaced: the run skips as busy.
 * A lease found free meanwhile is acquired again at once (as a wait).
 */
async function askToReplace(a: Acquiring, row: AcquireRow): Promise<'skip' | 'replace'> {
  const { opts, log, win } = a;
  if (!win?.scheduledAt || !a.store.requestReplace) return 'skip';
  let asked;
  try {
    asked = await a.store.requestReplace({
      job: opts.name,
      window: win.key,
      scheduledAt: win.scheduledAt,
      requester: a.owner,
      hostTime: new Date(),
    });
  } catch (err) {
    // A database that does not answer now: keep waiting (bounded), and ask again at the next poll.
    if (!isTransient(a.store, err)) throw err;
    log.debug({ err: (err as Error).message }, 'could not ask the holder to stop; asking again');
    return 'replace';
  }
  const holder = { holder: asked.holder ?? row.holder, holderWindow: asked.holderWindow ?? row.holderWindow };
  if (asked.outcome === 'same-window' || asked.outcome === 'not-earlier') {
    log.info(
      { ...holder, reason: asked.outcome },
      'lease busy with this or a later occurrence: not replaced (--on-busy replace only stops an earlier one)',
    );
    return 'skip';
  }
  if (asked.outcome === 'requested' && !a.saidWaiting)
    log.info(
      { ...holder, holderGeneration: asked.holderGeneration },
      'asked the holder of an earlier occurrence to stop; waiting',
    );
  return 'replace';
}

/**
 * Leaving without the lease (given up, skipped, signalled, missed) after an acquire of this
 * call went unanswered: it may have committed; give that lease back.
 */
async function giveBackUnanswered(a: Acquiring): Promise<void> {
  if (a.taken || !a.unanswered || !a.ownerIsOurs) return;
  if (!a.signalled) await sleep(GIVE_UP_SETTLE_MS);
  await abandonUnanswered(a.store, a.opts.name, a.owner, a.log, a.signalled ? SIGNALLED_ABANDON_MS : ABANDON_ANSWER_MS);
}
