// What every concern of the embedded store shares: the open file with this process's boot and
// host, the rows of the jobs and leases tables, and the clocks a lease is judged on.
import { readFileSync } from 'node:fs';
import { uptime } from 'node:os';
import type BetterSqlite3 from 'better-sqlite3';
import { monoNow } from '../../clock.js';

/** The open store as each concern's functions take it. */
export interface Sqlite {
  readonly db: BetterSqlite3.Database;
  /** This boot's id: a lease of another boot has expired. */
  readonly boot: string;
  readonly host: string;
  /** The state file's path (the token floor reads its identity). */
  readonly file: string;
}

/**
 * Milliseconds on a clock shared by every process of this host and untouched by wall-clock
 * steps: process.hrtime is CLOCK_MONOTONIC on Linux (since boot), mach_absolute_time on macOS,
 * QueryPerformanceCounter on Windows; all system-wide.
 */
export function hostMonotonicMs(): number {
  return Math.floor(monoNow());
}

/**
 * Identifies this boot, so monotonic readings from before a reboot are never compared with
 * readings after it. Linux has one; elsewhere the boot instant, rounded to a minute, stands in.
 */
export function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return `boot@${Math.round((Date.now() - uptime() * 1000) / 60_000)}`;
  }
}

export interface JobRecord {
  name: string;
  schedule: string | null;
  tz: string | null;
  window_mode: string | null;
  window_format: string | null;
  window_offset: string | null;
  ttl_ms: number | null;
  max_delay_ms: number | null;
  alert_after_ms: number | null;
  alert_lookback_ms: number | null;
  expect_min_ms: number | null;
  expect_max_ms: number | null;
  version: number;
  paused_at: number | null;
  paused_until: number | null;
  pause_reason: string | null;
  paused_by: string | null;
  /** Version 10: when the current schedule took effect (ms; null: since created_at). */
  schedule_since: number | null;
}

export interface LeaseRecord {
  name: string;
  owner: string;
  generation: number;
  acquired_at: number;
  renewed_at: number;
  released_at: number | null;
  renewed_mono: number;
  expires_mono: number;
  boot_id: string;
  ttl_ms: number;
  renew_interval_ms: number;
  window_key: string | null;
  holder_pid: number | null;
  /** Version 8: the window of the run that asked this generation to stop (run --on-busy replace). */
  replace_window: string | null;
  replace_generation: number | null;
}

export const hostOf = (owner: string | undefined | null): string =>
  owner ? owner.split(':')[0] || 'unknown' : 'unknown';

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function expired(s: Sqlite, l: LeaseRecord, nowMono: number): boolean {
  return l.boot_id !== s.boot || l.expires_mono <= nowMono;
}

/** The wall-clock instant matching a monotonic reading of this boot (for display only). */
export function wallOf(mono: number, nowMono: number, nowWall: number): Date {
  return new Date(nowWall + (mono - nowMono));
}

export function isPaused(j: Pick<JobRecord, 'paused_at' | 'paused_until'>, now: number): boolean {
  return j.paused_at != null && (j.paused_until == null || j.paused_until > now);
}

export const iso = (ms: number | null): string | undefined => (ms == null ? undefined : new Date(ms).toISOString());

export function pidOf(owner: string): number | null {
  const pid = Number(owner.split(':')[1]);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

export function stripNulls(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null && v !== undefined));
}
