// Clocks: monotonic time for every duration and deadline, wall time only as a reading to
// report, and the host-vs-database offset measured from one round trip.

/**
 * Milliseconds on the monotonic clock (never jumps, no meaning as a date). process.hrtime rather
 * than performance.now(): the first use of the global `performance` loads perf_hooks, which
 * every start would then pay for (scripts/bundle.mjs keeps such built-ins off the start).
 */
export function monoNow(): number {
  const [s, ns] = process.hrtime();
  return s * 1000 + ns / 1e6;
}

/**
 * How far an occurrence may lie ahead of the clock judging it and still be run: the clock that
 * fired the run (a crontab's host, the CronJob controller) a little ahead of this host's or the
 * database's. Further, its window would be completed before its time.
 */
export const MAX_AHEAD_MS = 60_000;

/**
 * How far ahead of this host's clock an occurrence named by `--scheduled-time` or JOB_NAME may
 * be and still go to the database to be judged (by MAX_AHEAD_MS, on its clock). The host clock
 * may only be behind the scheduler's; more than an hour is no clock error but a wrong time (a
 * typo, a hand-made Job name): refused before connecting, with nothing written, rather than
 * claimed and left open until that time comes.
 */
export const MAX_AHEAD_OF_HOST_MS = 3_600_000;

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, Math.max(0, ms));
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** A wall and monotonic reading taken together. */
export interface Stamp {
  wall: number;
  mono: number;
}

export function stamp(): Stamp {
  return { wall: Date.now(), mono: monoNow() };
}

export interface OffsetMeasurement {
  /** database clock minus host wall clock at the midpoint of the round trip, ms */
  offsetMs: number;
  /** half the round trip: the true offset lies within offsetMs ± uncertaintyMs */
  uncertaintyMs: number;
  rttMs: number;
}

export function measureOffset(sent: Stamp, received: Stamp, dbNow: Date): OffsetMeasurement {
  const rttMs = received.mono - sent.mono;
  // Midpoint on the wall clock, reached through the monotonic delta so a jump during the
  // round trip does not distort it.
  const midpointWall = sent.wall + rttMs / 2;
  return {
    offsetMs: Math.round(dbNow.getTime() - midpointWall),
    uncertaintyMs: Math.round(rttMs / 2),
    rttMs: Math.round(rttMs),
  };
}

/** Wall delta minus monotonic delta between two stamps: non-zero beyond noise is a jump. */
export function wallJumpMs(previous: Stamp, current: Stamp): number {
  return Math.round(current.wall - previous.wall - (current.mono - previous.mono));
}

/** Below this a wall/monotonic disagreement is timer noise or NTP slewing, not a step. */
export const CLOCK_JUMP_THRESHOLD_MS = 1_000;
/** Above this the host clock disagrees with the database enough to confuse humans reading logs. */
export const CLOCK_OFFSET_WARN_MS = 2_000;

/**
 * The offset is beyond the warning threshold whatever its uncertainty: a slow round trip (a
 * slow connect before the acquire, a starved CPU) widens the interval, not the offset.
 */
export function offsetIsLarge(m: OffsetMeasurement): boolean {
  return Math.abs(m.offsetMs) - m.uncertaintyMs > CLOCK_OFFSET_WARN_MS;
}
