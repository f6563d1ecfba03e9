// The clock a guard keeps the lease's stop point on: CLOCK_BOOTTIME, which keeps counting while
// the machine or VM is suspended, where CLOCK_MONOTONIC (leasejob's, process.hrtime) stops. The
// lease expires on the database's clock, which a suspend does not stop either: a stop point kept
// on the monotonic clock would, after a resume, still seem ahead while the lease is already gone.
// leasejob says its stop point in monotonic milliseconds (guard-protocol.ts); a guard converts it
// once, on arrival, to the boot clock. The native guard (src/native/guard.c, boot_stop_at) reads
// both clocks with clock_gettime and arms a CLOCK_BOOTTIME timerfd; the Node guard, which has no
// CLOCK_BOOTTIME, reads it from /proc/uptime (10 ms resolution) and looks again at least every
// second, since its timers run on the monotonic clock.
import { readFileSync } from 'node:fs';

/**
 * The stop point `stopAtMonoMs` (monotonic ms) on the boot clock: the time left now, from the
 * boot clock's now. Both readings taken together: a suspend after them moves both the lease's
 * expiry and this instant on, as the database's clock does.
 */
export function bootStopAt(stopAtMonoMs: number, monoNowMs: number, bootNowMs: number): number {
  return bootNowMs + (stopAtMonoMs - monoNowMs);
}

/** /proc/uptime's first field: seconds since boot with suspend counted, in ms; undefined without it. */
export function parseUptimeMs(text: string): number | undefined {
  const m = /^(\d+)(?:\.(\d{1,9}))?\s/.exec(text);
  if (m === null) return undefined;
  return Number(m[1]) * 1000 + Number(`0.${m[2] ?? '0'}`) * 1000;
}

function readUptimeMs(): number | undefined {
  try {
    return parseUptimeMs(readFileSync('/proc/uptime', 'latin1'));
  } catch {
    return undefined; // not Linux: the monotonic clock is all there is
  }
}

/**
 * A boot clock built on the monotonic one: monotonic now plus the time the machine has been
 * suspended, that is the largest (uptime - monotonic) seen so far (uptime is truncated to 10 ms,
 * and suspended time only grows, so the largest reading is the closest).
 */
export function bootClock(monoNow: () => number, uptimeMs: () => number | undefined = readUptimeMs): () => number {
  let suspendedMs = -Infinity;
  return () => {
    const mono = monoNow();
    const up = uptimeMs();
    if (up !== undefined) suspendedMs = Math.max(suspendedMs, up - mono);
    return mono + (Number.isFinite(suspendedMs) ? suspendedMs : 0);
  };
}
