// Monitoring by absence: the state of every registered job read with a few set-based queries,
// and the judgement of which windows are overdue, which owners are stuck, which keep failing.
import { DateTime } from 'luxon';
import { parseIsoOffset } from '../schedule/duration.js';
import { windowKey } from '../schedule/occurrence.js';
import { humanMs } from './table.js';
import {
  canonicalZone,
  nextTick,
  parseSchedule,
  previousTicks,
  typicalInterval,
  type Schedule,
} from '../schedule/cron.js';
import type { DueGroup, DueNotCompleted, JobRow, LeaseStore, ScheduleKey } from '../store/contract.js';
import { JOB_CHANGES_WARN, JOB_CHANGES_WINDOW_MS } from '../store/contract.js';

/** A due occurrence of a job that is not final, as status, check and the exporter report it. */
export interface NotCompleted {
  window: string;
  scheduledAt: Date;
  overdueSince: Date;
  /** The window's outcome: failed, lost, missed, running, abandoned (running, its owner gone), or `no run`. */
  outcome: string;
}

/** A registered job as stored, plus the judgement: who holds it now and what is due. */
export interface JobState extends JobRow {
  /** The owner while the lease is held, else null (`owner` keeps the last one). */
  holder: string | null;
  /** The window that should be completed by now (schedule-derived jobs only). */
  due?: { window: string; scheduledAt: Date; overdueSince: Date; completed: boolean } | undefined;
  /** The latest due window is not completed. */
  overdue: boolean;
  /**
   * Every due occurrence within the job's lookback, past its grace, that is not final (the
   * latest due one included), oldest first: reported until it completes, falls out of the
   * lookback, or is marked or skipped (completed_at set).
   */
  notCompleted: NotCompleted[];
  /** How many due occurrences are not final: `notCompleted` lists the oldest ten and the latest. */
  notCompletedCount: number;
  /**
   * Occurrences whose run failed (failed, lost, or abandoned by its owner) and that no later run
   * redid: due ones within the lookback and those not yet past their grace (any open window, for
   * a job without schedule-derived windows). The exporter's leasejob_failed_occurrences, which
   * pages at once rather than at the end of the grace.
   */
  failedOccurrences: number;
  /**
   * Occurrences whose attempt budget (run --max-attempts) is spent and that did not complete:
   * final until `run --rerun` or `leasejob mark`. Counted in failedOccurrences too.
   */
  exhaustedOccurrences: number;
  /**
   * `run --expect-duration`: why the job's run is outside what is expected of it (the one
   * running now past the maximum, else the latest completed one too short or too long), or null.
   */
  durationUnexpected: string | null;
  intervalMs: number | null;
}

/** Without --alert-after: half the interval, at most an hour (a daily job is late at 01:05 when due 00:05). */
export function defaultAlertAfterMs(intervalMs: number): number {
  return Math.min(intervalMs / 2, 3_600_000);
}

/**
 * Without --alert-lookback: the longer of a day and three intervals, so that a failed night is
 * still reported the next morning, and a weekly job's miss for three weeks.
 */
export function defaultAlertLookbackMs(intervalMs: number): number {
  return Math.max(24 * 3_600_000, 3 * intervalMs);
}

/**
 * The most occurrences judged per job (the newest): a minutely job's day is 1,440, each a probe
 * of the ledger for every job of its schedule. A longer lookback judges these only.
 */
export const MAX_JUDGED_OCCURRENCES = 24;

/**
 * Jobs' state on the store's clock, with the due-window judgement. `name` narrows to one job.
 * The rows and the judgement are read side by side (the PostgreSQL store gives each its own
 * connection): the rows are one large query, while the judgement needs only the few distinct
 * schedules (their due windows worked out here, once per schedule key however many jobs share
 * it) and then one probe per job and due window of whether it is final, which returns only what
 * is not. Read one after the other, a cold 10,000-job read took ~25 ms longer. The two reads are
 * a few milliseconds apart: a job registered or changed in between is judged at the next read.
 */
export async function readJobStates(store: LeaseStore, name?: string): Promise<{ dbNow: Date; jobs: JobState[] }> {
  const [{ dbNow, rows }, due] = await Promise.all([store.readJobRows(name), readDue(store, name)]);
  // Extended in place, every row the same way: spreading 20 fields into a new object for each
  // of many jobs cost more than the query (the monitor bench).
  const jobs = rows as JobState[];
  for (const j of jobs) {
    const d =
      j.windowMode === 'schedule' && typeof j.schedule === 'string'
        ? due.byKey.get(keyOf(j as unknown as ScheduleKey))
        : undefined;
    // Every row gets the same fields in the same order (one object shape; stable JSON).
    j.holder = j.held ? j.owner : null;
    j.overdue = false;
    j.notCompleted = [];
    j.notCompletedCount = 0;
    j.failedOccurrences = 0; // counted below, once the not-completed list is known
    j.exhaustedOccurrences = 0;
    j.durationUnexpected = durationJudgement(j);
    j.intervalMs = d?.intervalMs ?? null;
    j.due = undefined;
    // Recorded as running, but its generation no longer holds the lease: its owner was killed
    // or cut off before it could say. The next run resumes it (and records the loss).
    const abandoned = (outcome: string | null, generation: string | null | number): string =>
      outcome === null
        ? 'no run'
        : outcome === 'running' && !(j.held && String(generation) === j.generation)
          ? 'abandoned'
          : outcome;
    for (const w of j.openWindows) w.outcome = exhaustedIfSpent(w, abandoned(w.outcome, w.generation));
    const open = due.notCompleted.get(j.name);
    if (d?.windows && open) {
      j.notCompletedCount = open[0]!.count;
      for (const o of open) {
        const at = d.windows.get(o.window);
        if (at)
          j.notCompleted.push({
            window: o.window,
            scheduledAt: at.scheduledAt,
            overdueSince: at.overdueSince,
            outcome: abandoned(o.outcome, o.generation),
          });
      }
      // As for the latest below: nothing is expected of a paused job, nor of a tick within a
      // pause since ended (a suspended CronJob records nothing for it). Only the listed ones
      // can be dropped from the count; a pause longer than the list leaves the rest counted.
      if (j.paused) {
        j.notCompleted = [];
        j.notCompletedCount = 0;
      } else if (j.pause !== null) {
        const { since, until } = j.pause;
        const kept = j.notCompleted.filter(
          (o) => !(o.scheduledAt >= since && (until === null || o.scheduledAt < until)),
        );
        j.notCompletedCount -= j.notCompleted.length - kept.length;
        j.notCompleted = kept;
      }
    }
    j.failedOccurrences = countFailed(j, d);
    j.exhaustedOccurrences = countExhausted(j);
    // A job registered after the due tick, or whose schedule changed since (docs/occurrence.md),
    // was not yet expected to have run it, unless a run claimed it (a first run given its
    // --scheduled-time): then it is judged like any other.
    const claimed =
      d?.due !== undefined && j.notCompleted.some((o) => o.window === d.due!.window && o.outcome !== 'no run');
    const expectedFromMs = Math.max(j.createdAt.getTime(), j.scheduleSince?.getTime() ?? 0);
    if (!d?.due || (d.due.scheduledAt.getTime() < expectedFromMs && !claimed)) continue;
    const completed = d.due.window === j.lastWindow || !j.notCompleted.some((o) => o.window === d.due!.window);
    // A paused job is not expected to run (a crontab's runs record their ticks as skipped; a
    // suspended CronJob's record nothing), nor a tick that fell within a pause since ended.
    const at = d.due.scheduledAt.getTime();
    const pausedTick =
      j.pause !== null && at >= j.pause.since.getTime() && (j.pause.until === null || at < j.pause.until.getTime());
    j.overdue = !completed && !j.paused && !pausedTick;
    j.due = { window: d.due.window, scheduledAt: d.due.scheduledAt, overdueSince: d.due.overdueSince, completed };
  }
  return { dbNow, jobs };
}

/** A run's length as `check` says it: to the millisecond under a second, to the tenth under a minute. */
function spanText(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  return ms < 60_000 ? `${Number((ms / 1000).toFixed(1))}s` : humanMs(ms);
}

/** The job's run against its --expect-duration bounds: why it is outside them, or null. */
function durationJudgement(j: JobRow): string | null {
  const { expectMinMs: min, expectMaxMs: max } = j;
  if (max !== null && j.held && j.heldForMs !== null && j.heldForMs > max)
    return `running for ${spanText(j.heldForMs)}, longer than --expect-duration's maximum (${spanText(max)})`;
  const last = j.lastDurationMs;
  if (last === null || !j.lastWindow) return null;
  if (min !== null && last < min)
    return `window ${j.lastWindow} ran ${spanText(last)}, shorter than --expect-duration's minimum (${spanText(min)})`;
  if (max !== null && last > max)
    return `window ${j.lastWindow} ran ${spanText(last)}, longer than --expect-duration's maximum (${spanText(max)})`;
  return null;
}

/** A run's outcome that failed its occurrence (failed, lost, abandoned): what `check` calls failing. */
function failedOutcome(outcome: string): boolean {
  return outcome !== 'running' && outcome !== 'missed' && outcome !== 'no run';
}

/**
 * A job's occurrences whose run failed and that no later run redid: its due ones within the
 * lookback (the not-completed list) and the ones not yet due (before their grace ends); for a
 * job without a schedule to judge by, its listed open windows.
 */
function countFailed(j: JobState, d: DueWindows | undefined): number {
  const failed = new Set<string>();
  for (const o of j.notCompleted) if (failedOutcome(o.outcome)) failed.add(o.window);
  for (const w of j.openWindows) {
    // A failure with attempts left under its budget (run --max-attempts) is not final yet: it
    // counts once its attempts are spent (exhausted), or as any other once past its grace.
    if (attemptsLeft(w)) continue;
    if (failedOutcome(w.outcome) && (!d?.windows || d.windows.has(w.window) || d.pending?.has(w.window)))
      failed.add(w.window);
  }
  return failed.size;
}

const attemptsLeft = (w: JobRow['openWindows'][number]): boolean =>
  w.maxAttempts !== undefined && w.maxAttempts !== null && w.attempts < w.maxAttempts;

/** An abandoned window (its owner gone) whose attempts reached its budget is exhausted as a failed one is. */
function exhaustedIfSpent(w: JobRow['openWindows'][number], outcome: string): string {
  return outcome === 'abandoned' && w.maxAttempts != null && w.attempts >= w.maxAttempts ? 'exhausted' : outcome;
}

function countExhausted(j: JobState): number {
  const spent = new Set<string>();
  for (const o of j.notCompleted) if (o.outcome === 'exhausted') spent.add(o.window);
  for (const w of j.openWindows) if (w.outcome === 'exhausted') spent.add(w.window);
  return spent.size;
}

/** Each distinct schedule's due windows, and each job's due windows that are not final. */
async function readDue(
  store: LeaseStore,
  name?: string,
): Promise<{ byKey: Map<string, DueWindows>; notCompleted: Map<string, DueNotCompleted[]> }> {
  const { dbNow, keys } = await store.readScheduleKeys(name);
  const byKey = new Map<string, DueWindows>();
  const groups: DueGroup[] = [];
  for (const k of keys) {
    const d = dueWindowsOf(k, dbNow);
    byKey.set(keyOf(k), d);
    if (d.windows) {
      // A job registered with another name of UTC (Etc/UTC) by a leasejob before 0.1.0's last
      // change completed its windows as ...+00:00; they are the same occurrences.
      groups.push({
        ...k,
        windows: [...d.windows].map(([window, w]) => ({
          window,
          scheduledAt: w.scheduledAt,
          legacy: legacyUtcKey(k, window),
        })),
      });
    }
  }
  const notCompleted = new Map<string, DueNotCompleted[]>();
  for (const r of await store.readDueNotCompleted(groups, name)) {
    const list = notCompleted.get(r.job);
    if (list) list.push(r);
    else notCompleted.set(r.job, [r]);
  }
  return { byKey, notCompleted };
}

/** The `+00:00` spelling of an ISO window key of a job whose zone is an alias of UTC, else undefined. */
function legacyUtcKey(k: ScheduleKey, window: string): string | undefined {
  if (
    k.tz === null ||
    k.tz === 'UTC' ||
    canonicalZone(k.tz) !== 'UTC' ||
    k.windowFormat !== null ||
    !window.endsWith('Z')
  )
    return undefined;
  return `${window.slice(0, -1)}+00:00`;
}

// Once per job: a template, not an array joined (a few ms of a 10,000-job read).
const keyOf = (k: ScheduleKey): string =>
  `${k.schedule}\u0000${k.tz ?? '\u0001'}\u0000${k.windowFormat ?? '\u0001'}\u0000${k.windowOffset ?? '\u0001'}\u0000${
    k.alertAfterMs ?? '\u0001'
  }\u0000${k.alertLookbackMs ?? '\u0001'}`;

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

interface DueAt {
  scheduledAt: Date;
  overdueSince: Date;
}

interface DueWindows {
  intervalMs?: number;
  /** The latest due window. */
  due?: { window: string } & DueAt;
  /** Every due window within the lookback, oldest first (insertion order); a key's earliest tick. */
  windows?: Map<string, DueAt>;
  /** The windows of the ticks since the latest due one, up to now: not due yet (within their grace). */
  pending?: Set<string>;
}

/**
 * The due windows of a schedule key: ticks past their grace, from the lookback's start (at most
 * MAX_JUDGED_OCCURRENCES of them, the newest) to the latest, which is judged whatever the
 * lookback. Ticks that share a window key (a coarse --window-format) are one window, due from
 * its first tick.
 */
function dueWindowsOf(k: ScheduleKey, dbNow: Date): DueWindows {
  const schedule = cachedSchedule(k.schedule, k.tz ?? 'UTC');
  if (!schedule) return {};
  const intervalMs = typicalInterval(schedule, dbNow);
  const graceMs = k.alertAfterMs ?? defaultAlertAfterMs(intervalMs);
  const since = dbNow.getTime() - (k.alertLookbackMs ?? defaultAlertLookbackMs(intervalMs));
  try {
    const offset = k.windowOffset ? parseIsoOffset(k.windowOffset, '--window-offset') : undefined;
    const ticks: DateTime[] = previousTicks(
      schedule,
      new Date(dbNow.getTime() - graceMs),
      since,
      MAX_JUDGED_OCCURRENCES,
    ).map((ms) => DateTime.fromMillis(ms, { zone: schedule.tz }));
    const windows = new Map<string, DueAt>();
    let latest: ({ window: string } & DueAt) | undefined;
    for (let i = ticks.length - 1; i >= 0; i--) {
      const t = ticks[i]!;
      const window = windowKey(t, { format: k.windowFormat ?? undefined, offset });
      const at = { scheduledAt: t.toJSDate(), overdueSince: new Date(t.toMillis() + graceMs) };
      if (!windows.has(window)) windows.set(window, at);
      if (i === 0) latest = { window, ...at };
    }
    const pending = new Set<string>();
    for (
      let t = nextTick(schedule, ticks[0]!.toJSDate());
      t.toMillis() <= dbNow.getTime() && pending.size < MAX_JUDGED_OCCURRENCES;
      t = nextTick(schedule, t.toJSDate())
    )
      pending.add(windowKey(t, { format: k.windowFormat ?? undefined, offset }));
    return { intervalMs, due: latest, windows, pending };
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
    for (const o of j.notCompleted) {
      const w = o as unknown as Record<string, unknown>;
      w.scheduledAt = sharedIso(o.scheduledAt);
      w.overdueSince = sharedIso(o.overdueSince);
    }
  }
  return JSON.stringify(doc, null, 2);
}

export interface Problem {
  job: string;
  severity: 'critical' | 'warning';
  kind:
    | 'overdue'
    | 'not-completed'
    | 'stuck-owner'
    | 'failing'
    | 'exhausted'
    | 'duration'
    | 'settings-disagree'
    | 'replication';
  message: string;
  since?: Date | undefined;
  /**
   * `overdue` and `not-completed`: the occurrences the message names, as `status --json` lists
   * them (the oldest ten and the latest at most), and how many there are in all.
   */
  occurrences?: NotCompleted[] | undefined;
  count?: number | undefined;
}

export interface CheckLimits {
  /** An owner holding one generation longer than this is stuck. */
  maxHoldMs?: number | undefined;
  /** An open window at this many failed attempts or more keeps failing (default 1: from the first failure). */
  maxAttempts: number;
}

/** How many of a job's not-completed occurrences `check` names in its line (the count says the rest). */
const NAMED_OCCURRENCES = 5;

export function findProblems(jobs: JobState[], dbNow: Date, limits: CheckLimits): Problem[] {
  const problems: Problem[] = [];
  for (const j of jobs) {
    if (j.overdue && j.due) {
      problems.push({
        job: j.name,
        severity: 'critical',
        kind: 'overdue',
        since: j.due.overdueSince,
        occurrences: j.notCompleted.filter((o) => o.window === j.due!.window),
        count: 1,
        message:
          `window ${j.due.window} (scheduled ${j.due.scheduledAt.toISOString()}) not completed; overdue ` +
          `since ${j.due.overdueSince.toISOString()}`,
      });
    }
    // Earlier due occurrences that never completed (the latest is `overdue` above): a failed
    // night, minutes no host ran. Each stays reported until it completes, leaves the lookback,
    // or is marked or skipped.
    const latestListed = j.overdue && j.due ? 1 : 0;
    const earlier = latestListed ? j.notCompleted.filter((o) => o.window !== j.due!.window) : j.notCompleted;
    const count = j.notCompletedCount - latestListed;
    if (count > 0 && earlier.length > 0) {
      const named = earlier
        .slice(0, NAMED_OCCURRENCES)
        .map((o) => `${o.window} (${o.outcome})`)
        .join(', ');
      const more = count > NAMED_OCCURRENCES ? ` and ${count - NAMED_OCCURRENCES} more` : '';
      problems.push({
        job: j.name,
        severity: 'critical',
        kind: 'not-completed',
        since: earlier[0]!.overdueSince,
        occurrences: earlier,
        count,
        message:
          `${count} earlier due ${count === 1 ? 'occurrence' : 'occurrences'} not completed: ` +
          `${named}${more}; overdue since ${earlier[0]!.overdueSince.toISOString()}`,
      });
    }
    if (limits.maxHoldMs !== undefined && j.held && j.heldForMs !== null && j.heldForMs > limits.maxHoldMs) {
      const since = new Date(dbNow.getTime() - j.heldForMs);
      problems.push({
        job: j.name,
        severity: 'critical',
        kind: 'stuck-owner',
        since,
        message:
          `owner ${j.holder} has held generation ${j.generation} since ${since.toISOString()}, longer ` +
          `than --max-hold (${humanMs(limits.maxHoldMs)})`,
      });
    }
    if (j.durationUnexpected !== null)
      problems.push({ job: j.name, severity: 'warning', kind: 'duration', message: j.durationUnexpected });
    if (j.recentJobChanges >= JOB_CHANGES_WARN) {
      problems.push({
        job: j.name,
        severity: 'warning',
        kind: 'settings-disagree',
        message:
          `its settings changed ${j.recentJobChanges} times within ${humanMs(JOB_CHANGES_WINDOW_MS)} ` +
          `(job-changed events in \`leasejob history\`): hosts or deployments run it with different flags`,
      });
    }
    for (const w of j.openWindows) {
      if (w.outcome === 'exhausted') {
        problems.push({
          job: j.name,
          severity: 'critical',
          kind: 'exhausted',
          message:
            `window ${w.window} failed all ${w.attempts} of its attempts (run --max-attempts ${w.maxAttempts}): exhausted, ` +
            'later runs skip it; `leasejob run --rerun` runs it again, `leasejob mark` closes it',
        });
      } else if (w.attempts >= limits.maxAttempts && failedOutcome(w.outcome)) {
        problems.push({
          job: j.name,
          severity: 'warning',
          kind: 'failing',
          message: `window ${w.window} failed ${w.attempts} ${w.attempts === 1 ? 'attempt' : 'attempts'} (last outcome ${w.outcome})`,
        });
      }
    }
  }
  return problems;
}
