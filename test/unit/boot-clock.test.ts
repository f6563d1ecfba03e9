// The guards keep the lease's stop point on CLOCK_BOOTTIME (src/lease/boot-clock.ts; the native
// guard's boot_stop_at in src/native/guard.c does the same arithmetic with clock_gettime): a
// suspend of the machine, which a container cannot do in a test, is shown here with the clocks'
// readings, the monotonic one standing still while the boot one runs on.
import { describe, expect, it } from 'vitest';
import { bootClock, bootStopAt, parseUptimeMs } from '../../src/lease/boot-clock.js';

describe('bootStopAt', () => {
  it('keeps the time left, counted from the boot clock', () => {
    // Booted 1000 s ago, 40 s of it suspended: monotonic 960 s. The lease ends in 30 s.
    expect(bootStopAt(990_000, 960_000, 1_000_000)).toBe(1_030_000);
  });

  it('puts a stop point already passed in the boot clock past too', () => {
    expect(bootStopAt(950_000, 960_000, 1_000_000)).toBe(990_000);
  });

  it('a suspend after the conversion moves the boot instant no further: the guard stops on resume', () => {
    const stop = bootStopAt(990_000, 960_000, 1_000_000); // 30 s left
    // Suspended for an hour 10 s later: monotonic 970 s on resume, boot 4,610 s.
    const [monoOnResume, bootOnResume] = [970_000, 4_610_000];
    expect(bootOnResume >= stop).toBe(true); // the boot clock says: past, stop now
    expect(monoOnResume >= 990_000).toBe(false); // the monotonic one would say 20 s still left
  });
});

describe('parseUptimeMs', () => {
  it("reads /proc/uptime's first field (centiseconds) as milliseconds", () => {
    expect(parseUptimeMs('12345.67 54321.00\n')).toBe(12_345_670);
    expect(parseUptimeMs('7 1\n')).toBe(7_000);
    expect(parseUptimeMs('')).toBeUndefined();
    expect(parseUptimeMs('abc 1\n')).toBeUndefined();
  });
});

describe('bootClock', () => {
  it('is the monotonic clock plus the time suspended, which only grows', () => {
    let mono = 1_000;
    let up: number | undefined = 1_000;
    const now = bootClock(
      () => mono,
      () => up,
    );
    expect(now()).toBe(1_000);
    // Suspended 60 s: uptime ran on, monotonic did not.
    up = 61_000;
    expect(now()).toBe(61_000);
    mono = 2_000;
    up = 61_990; // uptime is truncated to 10 ms: a reading a little behind changes nothing
    expect(now()).toBe(62_000);
  });

  it('is the monotonic clock where there is no /proc/uptime', () => {
    const now = bootClock(
      () => 5,
      () => undefined,
    );
    expect(now()).toBe(5);
  });
});
