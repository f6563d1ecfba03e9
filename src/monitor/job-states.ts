// Monitoring by absence: the state of every registered job read with a few set-based queries,
// and the judgement of which windows are overdue, which owners are stuck, which keep failing.
import type { DateTime } from 'luxon';
import { parseIsoOffset } from '../schedule/duration.js';
import { windowKey } from '../schedule/occurrence.js';
import { humanMs } from './table.js';
import { canonicalZone, parseSchedule, previousTick, typicalInterval, type Schedule } from '../schedule/cron.js';
import type { DueProbe, JobRow, LeaseStore, ScheduleKey } from '../store/contract.js';
import { JOB_CHANGES_WARN, JOB_CHANGES_WINDOW_MS } from '../store/contract.js';

/** A registered job as stored, plus the judgement: who holds it now and what is due. */
export interface JobState extends JobRow {
  /** The owner while the lease is held, else null (`owner` keeps the last one). */
  holder: string | null;
  /** The window that should be completed by now (schedule-derived jobs only). */
  due?: { window: string; scheduledAt: Date; overdueSince: Date; completed: boolean } | undefined;
  overdue: boolean;
  intervalMs: number | null;
}

/** Without --alert-after: half the interval, at most an hour (a daily job is late at 01:05 when due 00:05). */
export function defaultAlertAfterMs(intervalMs: number): number {
  return Math.min(intervalMs / 2, 3_600_000);
}

/**
 * Jobs' state on the store's clock, with the due-window judgement. `name` narrows to one job.
 * The rows and the judgement are read side by side (the PostgreSQL store gives each its own
 * connection): the rows are one large query, while the judgement needs only the few distinct
 * schedules (their due windows worked out here) and then one probe per job of whether that
 * window is completed. Read one after the other, the two waits would add up.
 * The two reads are a few milliseconds apart: a job registered or changed in between is
 * judged at the next read.
 */
export async function readJobStates(store: LeaseStore, name?: string): Promise<{ dbNow: Date; jobs: JobState[] }> {
  const [{ dbNow, rows }, due] = await Promise.all([store.readJobRows(name), readDue(store, name)]);
  // Extended in place, every row the same way: spreading 20 fields into a new object for each
  // of many jobs cost more than the query (the monitor bench).
  const jobs = rows as JobState[];
  for (const j of jobs) {
    const d = j.windowMode === 'schedule' && typeof j.schedule === 'string' ? due.byKey.get(keyOf(j as ScheduleKey)) : undefined;
    // Every row gets the same fields in the same order (one object shape; stable JSON).
    j.holder = j.held ? j.owner : null;
    j.overdue = false;
    j.intervalMs = d?.intervalMs ?? null;
    j.due = undefined;
    // Recorded as running, but its generation no longer holds the lease: its owner was killed
    // or cut off before it could say. The next run resumes it (and records the loss).
    for (const w of j.openWindows) {
      if (w.outcome === 'running' && !(j.held && String(w.generation) === j.generation)) w.outcome = 'abandoned';
    }
    // A job registered after the due tick was not yet expected to have run it.
    if (!d?.due || d.due.scheduledAt.getTime() < j.createdAt.getTime()) continue;
    const completed = d.due.window === j.lastWindow || due.done.has(j.name);
    // A paused job is not expected to run (a crontab's runs record their ticks as skipped; a
    // suspended CronJob's record nothing), nor a tick that fell within a pause since ended.
    const at = d.due.scheduledAt.getTime();
    const pausedTick = j.pause !== null && at >= j.pause.since.getTime() && (j.pause.until === null || at < j.pause.until.getTime());
    j.overdue = !completed && !j.paused && !pausedTick;
    j.due = { window: d.due.window, scheduledAt: d.due.scheduledAt, overdueSince: d.due.overdueSince, completed };
  }
  return { dbNow, jobs };
}

/** Each distinct schedule's due window, and the jobs that have completed theirs. */
async function readDue(store: LeaseStore, name?: string): Promise<{ byKey: Map<string, DueWindow>; done: Set<string> }> {
  const { dbNow, keys } = await store.readScheduleKeys(name);
  const byKey = new Map<string, DueWindow>();
  const probes: DueProbe[] = [];
  for (const k of keys) {
    const d = dueWindowOf(k, dbNow);
    byKey.set(keyOf(k), d);
    if (d.due) {
      probes.push({ ...k, window: d.due.window });
      // A job registered with another name of UTC (Etc/UTC) by a leasejob before 0.1.0's last
      // change completed its windows as ...+00:00; they are the same occurrences.
      const legacy = legacyUtcKey(k, d.due.window);
      if (legacy !== undefined) probes.push({ ...k, window: legacy });
    }
  }
  return { byKey, done: await store.readCompletedDue(probes, name) };
}

/** The `+00:00` spelling of an ISO window key of a job whose zone is an alias of UTC, else undefined. */
function legacyUtcKey(k: ScheduleKey, window: string): string | undefined {
  if (k.tz === null || k.tz === 'UTC' || canonicalZone(k.tz) !== 'UTC' || k.windowFormat !== null || !window.endsWith('Z')) return undefined;
  return `${window.slice(0, -1)}+00:00`;
}

const keyOf = (k: ScheduleKey): string =>
  `${k.schedule}\u0000${k.tz ?? '\u0001'}\u0000${k.windowFormat ?? '\u0001'}\u0000${k.windowOffset ?? '\u0001'}\u0000${k.alertAfterMs ?? '\u0001'}`;

// Schedules repeat across status calls and scrapes: parse and step each (expression, zone) once.
const scheduleCache = new Map<string, Schedule | null>();
function cachedSchedule(expr: string, tz: string): Schedule | null {
  const key = `${expr}\u0000${tz}`;
  let s = scheduleCache.get(key);
  if (s === undefined) {
    try {
      s = parseSchedule(expr, tz);
    } catch {
      s = null;
    }
    scheduleCache.set(key, s);
  }
  return s;
}

interface DueWindow {
  intervalMs?: number;
  due?: { window: string; scheduledAt: Date; overdueSince: Date };
}

function dueWindowOf(k: ScheduleKey, dbNow: Date): DueWindow {
  const schedule = cachedSchedule(k.schedule, k.tz ?? 'UTC');
  if (!schedule) return {};
  const intervalMs = typicalInterval(schedule, dbNow);
  const graceMs = k.alertAfterMs ?? defaultAlertAfterMs(intervalMs);
  const tick: DateTime = previousTick(schedule, new Date(dbNow.getTime() - graceMs));
  try {
    const window = windowKey(tick, {
      format: k.windowFormat ?? undefined,
      offset: k.windowOffset ? parseIsoOffset(k.windowOffset, '--window-offset') : undefined,
    });
    return { intervalMs, due: { window, scheduledAt: tick.toJSDate(), overdueSince: new Date(tick.toMillis() + graceMs) } };
  } catch {
    return { intervalMs };
  }
}

/**
 * `status --json`: the text of JSON.stringify(doc, null, 2), made faster. Stringify calls
 * Date#toJSON from C++ for every instant (up to four per job); turning them into ISO strings
 * here first is cheaper (the monitor bench). The due
 * window's two instants are one Date object shared by every job of a schedule (readJobStates),
 * so each is formatted once. It converts in place: the states are not to be used afterwards.
 */
export function statesToJson(doc: { store: string; location: string; dbNow: Date; jobs: JobState[] }): string {
  const iso = (d: Date | null): string | null => (d === null ? null : d.toISOString());
  const shared = new Map<Date, string>();
  const sharedIso = (d: Date): string => {
    let text = shared.get(d);
    if (text === undefined) {
      text = d.toISOString();
      shared.set(d, text);
    }
    return text;
  };
  for (const j of doc.jobs) {
    const w = j as unknown as Record<string, unknown>;
    w.createdAt = iso(j.createdAt);
    w.lastCompletedAt = iso(j.lastCompletedAt);
    if (j.pause) {
      const p = j.pause as unknown as Record<string, unknown>;
      p.since = iso(j.pause.since);
      p.until = iso(j.pause.until);
    }
    if (j.due) {
      const due = j.due as unknown as Record<string, unknown>;
      due.scheduledAt = sharedIso(j.due.scheduledAt);
      due.overdueSince = sharedIso(j.due.overdueSince);
    }
  }
  return JSON.stringify(doc, null, 2);
}

export interface Problem {
  job: string;
  severity: 'critical' | 'warning';
  kind: 'overdue' | 'stuck-owner' | 'failing' | 'settings-disagree' | 'replication';
  message: string;
  since?: Date | undefined;
}

export interface CheckLimits {
  /** An owner holding one generation longer than this is stuck. */
  maxHoldMs?: number | undefined;
  /** An open window at this many attempts or more keeps failing. */
  maxAttempts: number;
}

export function findProblems(jobs: JobState[], dbNow: Date, limits: CheckLimits): Problem[] {
  const problems: Problem[] = [];
  for (const j of jobs) {
    if (j.overdue && j.due) {
      problems.push({
        job: j.name, severity: 'critical', kind: 'overdue', since: j.due.overdueSince,
        message: `window ${j.due.window} (scheduled ${j.due.scheduledAt.toISOString()}) not completed; overdue since ${j.due.overdueSince.toISOString()}`,
      });
    }
    if (limits.maxHoldMs !== undefined && j.held && j.heldForMs !== null && j.heldForMs > limits.maxHoldMs) {
      const since = new Date(dbNow.getTime() - j.heldForMs);
      problems.push({
        job: j.name, severity: 'critical', kind: 'stuck-owner', since,
        message: `owner ${j.holder} has held generation ${j.generation} since ${since.toISOString()}, longer than --max-hold (${humanMs(limits.maxHoldMs)})`,
      });
    }
    if (j.recentJobChanges >= JOB_CHANGES_WARN) {
      problems.push({
        job: j.name, severity: 'warning', kind: 'settings-disagree',
        message: `its settings changed ${j.recentJobChanges} times within ${humanMs(JOB_CHANGES_WINDOW_MS)} (job-changed events in \`leasejob history\`): hosts or deployments run it with different flags`,
      });
    }
    for (const w of j.openWindows) {
      if (w.attempts >= limits.maxAttempts && w.outcome !== 'running' && w.outcome !== 'missed') {
        problems.push({ job: j.name, severity: 'warning', kind: 'failing', message: `window ${w.window} failed ${w.attempts} ${w.attempts === 1 ? 'attempt' : 'attempts'} (last outcome ${w.outcome})` });
      }
    }
  }
  return problems;
}
