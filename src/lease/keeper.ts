// The lease keeper: renews every interval and keeps a local deadline on the monotonic clock,
// measured from when the last successful renewal was *sent*, so the task is told to stop
// early enough to be gone before the lease can expire.
import {
  CLOCK_JUMP_THRESHOLD_MS,
  measureOffset,
  monoNow,
  offsetIsLarge,
  stamp,
  wallJumpMs,
  type OffsetMeasurement,
  type Stamp,
} from '../clock.js';
import type { Logger } from '../log.js';
import type { LeaseStore as Store } from '../store/contract.js';
import type { AbortReason, LeaseDeadline, LossReason } from './types.js';

export interface LeaseTiming {
  ttlMs: number;
  renewIntervalMs: number;
  /** What the task needs between "stop" and "gone": SIGTERM, grace, SIGKILL. */
  killGraceMs: number;
}

/** Room for timer lateness and the SIGKILL itself between the end of the grace and expiry. */
export function safetyMarginMs(ttlMs: number): number {
  return Math.min(1_000, Math.round(ttlMs / 10));
}

/** How long after a successful renewal was sent the keeper gives up and stops the task. */
export function stopAfterMs(t: LeaseTiming): number {
  return t.ttlMs - t.killGraceMs - safetyMarginMs(t.ttlMs);
}

/**
 * How long one renewal may wait for the lease row's lock and for its answer, given the time
 * left before the local deadline. Bounded so a blocked renewal (a long fenced transaction
 * holding the row FOR SHARE) or a connection gone silent fails in time for a retry on a new
 * connection: an attempt takes at most half of what is left while that is over 1.5 s, then
 * all of it. Whole milliseconds: the budget comes from the monotonic clock.
 */
export function renewalBounds(
  leftMs: number,
  renewIntervalMs: number,
): { lockTimeoutMs: number; answerTimeoutMs: number } {
  const budget = Math.max(100, leftMs);
  const attempt = budget > 1_500 ? budget / 2 : budget;
  // The lock timeout ends 500 ms before the answer is given up on (when there is room): a
  // renewal blocked by a fenced transaction comes back with its own error (55P03) on the same
  // connection, not as a silent one that is dropped.
  const lockTimeoutMs = Math.floor(Math.max(50, Math.min(renewIntervalMs, attempt - 500)));
  return { lockTimeoutMs, answerTimeoutMs: Math.floor(Math.max(lockTimeoutMs + 50, attempt)) };
}

/** A measurement this tight (half its round trip) is taken as the clock's current state. */
const PRECISE_OFFSET_MS = 250;

export interface HeldLease {
  job: string;
  owner: string;
  generation: string;
  window?: string | undefined;
}

export class LeaseKeeper implements LeaseDeadline {
  private lastSent: Stamp;
  private readonly stopAtListeners = new Set<(stopAtMono: number) => void>();
  private renewTimer: NodeJS.Timeout | undefined;
  private deadlineTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private renewing = false;
  /** Failures since the last successful renewal, and the last error, for the renew-failed event. */
  private failureStreak = 0;
  private lastError = '';
  /** Clock-offset measurements of this lease (acquire, renewals): the latest precise one, and the least uncertain. */
  private latestPreciseOffset: OffsetMeasurement | undefined;
  private leastUncertainOffset: OffsetMeasurement | undefined;
  /** The latest measurement whatever its uncertainty: sent with each renewal for contenders (two clocks). */
  private latestOffset: OffsetMeasurement | undefined;

  constructor(
    private readonly store: Store,
    private readonly lease: HeldLease,
    private readonly timing: LeaseTiming,
    acquireSent: Stamp,
    private readonly log: Logger,
    private readonly onLoss: (reason: LossReason) => void,
    private readonly onClockJump: (jumpMs: number) => void = () => {},
    private readonly onRecovered: (failures: number, lastError: string) => void = () => {},
    private readonly onDatabaseStep: (stepMs: number) => void = () => {},
  ) {
    this.lastSent = acquireSent;
  }

  start(): void {
    this.armDeadline();
    // Counted, as the deadline is, from when the acquire was sent: an acquire answered late
    // leaves less than an interval, and a renewal put off a whole interval from now could
    // come after the deadline (the child stopped with the lease still held).
    this.scheduleRenewal(this.timing.renewIntervalMs - (monoNow() - this.lastSent.mono));
  }

  /** A measurement of the host's clock against the database's (the acquire's, each renewal's). */
  noteOffset(m: OffsetMeasurement | undefined): void {
    if (m === undefined) return;
    this.latestOffset = m;
    if (m.uncertaintyMs <= PRECISE_OFFSET_MS) this.latestPreciseOffset = m;
    if (this.leastUncertainOffset === undefined || m.uncertaintyMs <= this.leastUncertainOffset.uncertaintyMs)
      this.leastUncertainOffset = m;
  }

  /**
   * What to record as the host's offset: the latest precise measurement (a clock stepped or
   * slewed during the run is seen as it is now), else the least uncertain one. Not simply the
   * latest: one answer delayed by a busy database gives a wide and possibly far-off figure,
   * which the exporter would show (and LeasejobClockOffset weigh) until the host's next run.
   */
  offsetToRecord(): OffsetMeasurement | undefined {
    return this.latestPreciseOffset ?? this.leastUncertainOffset;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.renewTimer);
    clearTimeout(this.deadlineTimer);
  }

  /** Renewals failed since the last that succeeded, and the last error (for a renew-failed event). */
  renewFailures(): { count: number; lastError: string } {
    return { count: this.failureStreak, lastError: this.lastError };
  }

  /** Time left on the monotonic clock before the lease may expire (conservative). */
  remainingMs(): number {
    return this.lastSent.mono + this.timing.ttlMs - monoNow();
  }

  /** The stop point: when the task is told to stop unless a renewal succeeds first (monotonic ms). */
  stopAtMono(): number {
    return this.lastSent.mono + stopAfterMs(this.timing);
  }

  onStopAtChange(listener: (stopAtMono: number) => void): () => void {
    this.stopAtListeners.add(listener);
    return () => this.stopAtListeners.delete(listener);
  }

  private armDeadline(): void {
    clearTimeout(this.deadlineTimer);
    for (const listener of this.stopAtListeners) listener(this.stopAtMono());
    const due = this.stopAtMono() - monoNow();
    this.deadlineTimer = setTimeout(
      () => this.lose({ kind: 'deadline', detail: 'renewal did not succeed in time' }),
      Math.max(0, due),
    );
  }

  private scheduleRenewal(delayMs: number): void {
    if (this.stopped) return;
    clearTimeout(this.renewTimer);
    this.renewTimer = setTimeout(() => void this.renew(), Math.max(0, delayMs));
  }

  private async renew(): Promise<void> {
    if (this.stopped || this.renewing) return;
    this.renewing = true;
    const sent = stamp();
    const { lockTimeoutMs, answerTimeoutMs } = renewalBounds(
      this.lastSent.mono + stopAfterMs(this.timing) - sent.mono,
      this.timing.renewIntervalMs,
    );
    try {
      const row = await this.store.renew(
        this.lease.job,
        this.lease.owner,
        this.lease.generation,
        this.timing.ttlMs,
        lockTimeoutMs,
        answerTimeoutMs,
        this.latestOffset,
      );
      const received = stamp();
      if (this.stopped) return;
      if (!row || row.notRenewed) {
        this.lose({ kind: 'lease-lost', detail: this.notRenewedDetail(row, sent, received) });
        return;
      }
      const jump = wallJumpMs(this.lastSent, sent);
      this.lastSent = sent;
      this.armDeadline();
      const offset = measureOffset(sent, received, row.dbNow);
      const step = databaseStepMs(this.latestOffset, offset, jump);
      this.noteOffset(offset);
      if (step !== 0) {
        // The lease was renewed on the stepped clock: a full TTL ahead of it, so it still holds.
        // Contenders of this version see the clocks disagree until the next renewal records
        // this offset, and wait rather than take it (docs/fencing.md "Which clock decides what").
        this.log.warn(
          { stepMs: step, offsetMs: offset.offsetMs, uncertaintyMs: offset.uncertaintyMs },
          'database clock stepped; the lease was renewed on it and still holds',
        );
        this.onDatabaseStep(step);
      }
      if (this.failureStreak > 0) {
        this.onRecovered(this.failureStreak, this.lastError);
        this.failureStreak = 0;
      }
      const fields = { generation: this.lease.generation, ...offset, expiresAt: row.expiresAt };
      if (offsetIsLarge(offset)) this.log.warn(fields, 'clock offset to database is large');
      else this.log.debug(fields, 'lease renewed');
      if (Math.abs(jump) > CLOCK_JUMP_THRESHOLD_MS) {
        this.log.warn({ jumpMs: jump }, 'wall clock jump detected');
        this.onClockJump(jump);
      }
      // A later occurrence asked this holder to stop (--on-busy replace): the lease is still ours,
      // so the child is stopped with its grace and the window recorded before the lease moves.
      if (row.replaceFor) {
        this.lose({ kind: 'replaced', detail: `replaced by the run of occurrence ${row.replaceFor}` });
        return;
      }
      this.scheduleRenewal(this.timing.renewIntervalMs - (monoNow() - sent.mono));
    } catch (err) {
      if (this.stopped) return;
      this.failureStreak += 1;
      const code = (err as { code?: string }).code;
      this.lastError = code ? `${code}: ${(err as Error).message}` : (err as Error).message;
      const lockWait = code === '55P03';
      this.log.warn(
        // A string, as everywhere: pino's error serializer would print an object as {"type":"Object",...}.
        { err: (err as Error).message, ...(code ? { code } : {}), remainingMs: Math.round(this.remainingMs()) },
        lockWait ? 'renewal failed: lease row locked by a long fenced transaction' : 'renewal failed',
      );
      // Retry soon, a few times within an interval, until the deadline decides.
      this.scheduleRenewal(Math.max(100, Math.min(1_000, this.timing.renewIntervalMs / 4)));
    } finally {
      this.renewing = false;
    }
  }

  /**
   * Why a renewal found the lease gone. With the database's clock reading (PostgreSQL from 035),
   * a forward step of that clock past the lease is told from a takeover: the database counts the
   * lease expired while this holder's own clock says it holds. Contenders of this version wait a
   * full TTL before taking it (the clocks disagree); the command is stopped within that TTL.
   */
  private notRenewedDetail(row: { dbNow: Date } | undefined, sent: Stamp, received: Stamp): string {
    const gone = 'renewal found the lease taken, expired or released';
    if (!row) return gone;
    const step = databaseStepMs(
      this.latestOffset,
      measureOffset(sent, received, row.dbNow),
      wallJumpMs(this.lastSent, sent),
    );
    if (step <= 0) return gone;
    return (
      `${gone}: the database clock stepped forward by about ${Math.round(step / 1000)} s, past the lease ` +
      '(contenders that see the step wait a full TTL before taking it over; the command is stopped before then)'
    );
  }

  private lose(reason: LossReason): void {
    if (this.stopped) return;
    this.stop();
    this.onLoss(reason);
  }
}

/**
 * How far the database clock stepped between two offset measurements (0: it did not, as far as
 * they can tell): their difference beyond both uncertainties and the jump threshold, not
 * explained by this host's own wall clock jumping (`hostJumpMs`, which moves the offset the
 * other way: the wall-clock jump warning covers it).
 */
export function databaseStepMs(
  previous: OffsetMeasurement | undefined,
  current: OffsetMeasurement,
  hostJumpMs: number,
): number {
  if (!previous) return 0;
  const delta = current.offsetMs - previous.offsetMs + hostJumpMs;
  const noise = Math.max(CLOCK_JUMP_THRESHOLD_MS, previous.uncertaintyMs + current.uncertaintyMs);
  return Math.abs(delta) > noise ? delta : 0;
}

/**
 * The keeper of a run's lease (one window, or a sequence of them): a loss is logged and stops
 * the task with whatever is left before expiry, minus the margin for the kill itself; clock
 * jumps and renewal failures (recorded once the database answers again: the evidence of a
 * pause or a flaky network) become events, best effort, within `eventTimeoutMs`.
 */
export function keepRunLease(
  store: Store,
  lease: HeldLease,
  timing: LeaseTiming,
  sent: Stamp,
  log: Logger,
  eventTimeoutMs: number,
  stop: (reason: LossReason & { graceMs: number }) => void,
): LeaseKeeper {
  const event = (kind: string, detail: Record<string, unknown>): void => {
    void store
      .recordEvent({ ...lease, kind, hostTime: new Date(), detail, answerTimeoutMs: eventTimeoutMs })
      .catch(() => {});
  };
  const keeper: LeaseKeeper = new LeaseKeeper(
    store,
    lease,
    timing,
    sent,
    log,
    (loss) => {
      const fields = {
        generation: lease.generation,
        reason: loss.kind,
        detail: loss.detail,
        remainingMs: Math.round(keeper.remainingMs()),
      };
      if (loss.kind === 'replaced') log.warn(fields, 'replaced by a later occurrence; stopping the command');
      else log.warn(fields, 'lease lost');
      const graceMs = Math.max(0, Math.min(timing.killGraceMs, keeper.remainingMs() - safetyMarginMs(timing.ttlMs)));
      stop({ ...loss, graceMs });
    },
    (jumpMs) => event('clock-jump', { jump_ms: jumpMs }),
    (failures, lastError) => event('renew-failed', { failures, last_error: lastError }),
    (stepMs) => event('clock-jump', { clock: 'database', step_ms: stepMs }),
  );
  return keeper;
}

/**
 * Starts the keeper of a run's lease (keepRunLease) and wires the run's two other early stops
 * to `stop`: the caller's cancellation (`signal`), and an acquisition answered too late to run
 * safely (a slow network, a starved CPU): past the stop point the task would have to be
 * stopped at once, or might even start after the lease could have expired, so it never starts.
 * Returns what undoes the cancellation's wiring, for when the run is over.
 */
export function startRunLease(
  keeper: LeaseKeeper,
  held: { offset: OffsetMeasurement | undefined; sent: Stamp; timing: LeaseTiming; generation: string },
  cancel: { signal?: AbortSignal | undefined; killGraceMs: number },
  stop: (reason: AbortReason) => void,
  log: Logger,
): () => void {
  keeper.noteOffset(held.offset);
  keeper.start();
  const onCancel = (): void => stop({ kind: 'cancelled', reason: cancel.signal?.reason, graceMs: cancel.killGraceMs });
  cancel.signal?.addEventListener('abort', onCancel, { once: true });
  if (cancel.signal?.aborted) onCancel();
  if (monoNow() >= held.sent.mono + stopAfterMs(held.timing)) {
    log.warn(
      { generation: held.generation, remainingMs: Math.round(keeper.remainingMs()) },
      'lease acquired too late to start safely',
    );
    stop({ kind: 'deadline', detail: 'the acquisition was answered after the stop point', graceMs: 0 });
  }
  return () => cancel.signal?.removeEventListener('abort', onCancel);
}
