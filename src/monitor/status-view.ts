// The status page's view model: each job's state in one word, and the list narrowed by a
// search, a state and a page, from the job states `status` and the exporter already read.
import type { JobState } from './job-states.js';
import { nextTick, parseSchedule, type Schedule } from '../schedule/cron.js';
import type { HostClock } from '../store/contract.js';
import { GRID_STEPS } from './time-grid.js';
import { humanMs } from '../schedule/duration.js';

/**
 * Worst first: the order of the chips and of the list. Each names what is wrong (issue 27): the
 * outcome of a due occurrence `check` reports, or a run the job has open.
 */
export const JOB_STATES = [
  'failing',
  'exhausted',
  'missed',
  'never-ran',
  'running-late',
  'paused',
  'running',
  'healthy',
] as const;
export type JobStateName = (typeof JOB_STATES)[number];

/** How a state reads on its badge and chip. */
export const STATE_LABEL: Record<JobStateName, string> = {
  failing: 'failing',
  exhausted: 'exhausted',
  missed: 'missed',
  'never-ran': 'never ran',
  'running-late': 'running late',
  paused: 'paused',
  running: 'running',
  healthy: 'healthy',
};

/** What each state means (the chips' titles; docs/status-page.md has the same table). */
export const STATE_MEANING: Record<JobStateName, string> = {
  failing: 'a run failed, lost its lease or was abandoned by a runner that died, and no later run redid it',
  exhausted: 'a run failed with its --max-attempts spent: later runs skip it until a rerun or a mark',
  missed: 'a due occurrence was missed (older than --max-delay, beyond --catch-up-limit)',
  'never-ran': 'a due occurrence past its grace that no host ran',
  'running-late': 'running past its grace (--alert-after), or longer than --expect-duration allows',
  paused: 'paused by leasejob pause: nothing is expected of it',
  running: 'a run holds the lease now, within its grace',
  healthy: 'nothing due is missing and no run failed',
};

/** The state a due occurrence's outcome (as `check` names it) or an open window's outcome puts its job in. */
const OUTCOME_STATE: Record<string, JobStateName> = {
  failed: 'failing',
  lost: 'failing',
  abandoned: 'failing',
  replaced: 'failing',
  exhausted: 'exhausted',
  missed: 'missed',
  'no run': 'never-ran',
  running: 'running-late',
};

const rank = (s: JobStateName): number => JOB_STATES.indexOf(s);

/**
 * One state for a job, naming the cause: the worst of its due occurrences that `check` reports
 * (by their outcome: failed, exhausted, missed, no run, still running past the grace) and of its
 * open windows (a failure is shown from the first one, retries left or not), else paused, running
 * (running late when longer than --expect-duration's maximum), healthy. A paused job is paused
 * whatever else: nothing is expected of it, and pausing is often how an operator answers a
 * failing job. The page shows the holder, the pause and the occurrences beside the badge.
 */
export function stateOf(j: JobState): JobStateName {
  if (j.paused) return 'paused';
  let worst: JobStateName | undefined;
  const consider = (outcome: string): void => {
    const s = OUTCOME_STATE[outcome];
    if (s !== undefined && s !== 'running-late' && (worst === undefined || rank(s) < rank(worst))) worst = s;
  };
  for (const o of j.notCompleted) {
    // Still running past the grace: late, not failed (an open window running is not a cause).
    if (o.outcome === 'running' && (worst === undefined || rank('running-late') < rank(worst))) worst = 'running-late';
    else consider(o.outcome);
  }
  // An open window missed is not reported by `check` (a later occurrence makes up for it); failed is, at once.
  for (const w of j.openWindows)
    if (OUTCOME_STATE[w.outcome] === 'failing' || w.outcome === 'exhausted') consider(w.outcome);
  // Counted beyond the listed ones (the oldest ten and the latest): never shown as healthy.
  if (worst === undefined && j.notCompletedCount > 0) worst = 'never-ran';
  if (worst !== undefined) return worst;
  if (j.held)
    return j.expectMaxMs !== null && j.heldForMs !== null && j.heldForMs > j.expectMaxMs ? 'running-late' : 'running';
  return 'healthy';
}

/**
 * The held lease's time left, and whether its holder is gone (its database session, or on the
 * embedded store its process on this boot: a crash): "holder gone, lease expires in 1m14s". The
 * lease is waited out all the same; the next run takes it over then.
 */
export function leaseLeftText(j: Pick<JobState, 'holderGone' | 'expiresInMs'>): string {
  return `${j.holderGone ? 'holder gone, lease ' : ''}expires in ${humanMs(j.expiresInMs)}`;
}

export interface ListQuery {
  /** Case-insensitive part of a job name; '' for all. */
  q: string;
  state: JobStateName | '';
  /** 1-based. */
  page: number;
  per: number;
  /** The grid's column width (`every=`, time-grid.ts's GRID_STEPS); '' to choose from the jobs shown. */
  every: string;
}

export const DEFAULT_PER_PAGE = 100;
export const MAX_PER_PAGE = 1000;
/** A search longer than any job name matches nothing; cut so a huge query costs nothing. */
const MAX_QUERY_LENGTH = 200;

const whole = (v: string | null, fallback: number, min: number, max: number): number => {
  const n = v === null || !/^\d{1,9}$/.test(v) ? fallback : Number(v);
  return Math.min(max, Math.max(min, n));
};

/** The list's query string, read leniently: a page asks, it is not a command line (out of range is clamped). */
export function parseListQuery(params: URLSearchParams): ListQuery {
  const state = params.get('state') ?? '';
  return {
    q: (params.get('q') ?? '').trim().slice(0, MAX_QUERY_LENGTH),
    state: (JOB_STATES as readonly string[]).includes(state) ? (state as JobStateName) : '',
    page: whole(params.get('page'), 1, 1, 1_000_000),
    per: whole(params.get('per'), DEFAULT_PER_PAGE, 1, MAX_PER_PAGE),
    every: GRID_STEPS.some((s) => s.key === params.get('every')) ? params.get('every')! : '',
  };
}

export interface JobListItem {
  job: JobState;
  state: JobStateName;
  nextDue: Date | null;
}

export interface ListView {
  dbNow: Date;
  total: number;
  counts: Record<JobStateName, number>;
  /** Jobs the search and state filter keep, before paging. */
  matched: number;
  query: ListQuery;
  pages: number;
  items: JobListItem[];
  hosts: HostClock[];
}

/**
 * The jobs of one page: every job classified and counted (10,000 in a few milliseconds), the
 * ones searched for sorted worst first then by name, and only the page's jobs given their
 * next due time (one schedule step each, parsed once per schedule and zone).
 */
export function listView(dbNow: Date, jobs: JobState[], hosts: HostClock[], query: ListQuery): ListView {
  const counts = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobStateName, number>;
  const needle = query.q.toLowerCase();
  const kept: Array<{ job: JobState; state: JobStateName; rank: number }> = [];
  for (const job of jobs) {
    const state = stateOf(job);
    counts[state]++;
    if (query.state && state !== query.state) continue;
    if (needle && !job.name.toLowerCase().includes(needle)) continue;
    kept.push({ job, state, rank: JOB_STATES.indexOf(state) });
  }
  // The rows come ordered by name; a stable sort by state keeps that order within a state.
  kept.sort((a, b) => a.rank - b.rank);
  const pages = Math.max(1, Math.ceil(kept.length / query.per));
  const page = Math.min(query.page, pages);
  const schedules = new Map<string, Schedule | null>();
  const items = kept
    .slice((page - 1) * query.per, page * query.per)
    .map(({ job, state }) => ({ job, state, nextDue: nextDueOf(job, dbNow, schedules) }));
  const byOffset = [...hosts].sort(
    (a, b) =>
      Math.abs(b.offsetMs) - b.uncertaintyMs - (Math.abs(a.offsetMs) - a.uncertaintyMs) || a.host.localeCompare(b.host),
  );
  return {
    dbNow,
    total: jobs.length,
    counts,
    matched: kept.length,
    query: { ...query, page },
    pages,
    items,
    hosts: byOffset,
  };
}

/** The job's next scheduled occurrence after now, on the database clock; null without a schedule. */
export function nextDueOf(job: JobState, dbNow: Date, cache = new Map<string, Schedule | null>()): Date | null {
  if (typeof job.schedule !== 'string') return null;
  const key = `${job.schedule}\u0000${job.tz ?? 'UTC'}`;
  let s = cache.get(key);
  if (s === undefined) {
    try {
      s = parseSchedule(job.schedule, job.tz ?? 'UTC');
    } catch {
      s = null;
    }
    cache.set(key, s);
  }
  return s ? nextTick(s, dbNow).toJSDate() : null;
}
