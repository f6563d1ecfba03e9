// The status page's view model: each job's state in one word, and the list narrowed by a
// search, a state and a page, from the job states `status` and the exporter already read.
import type { JobState } from './job-states.js';
import { nextTick, parseSchedule, type Schedule } from '../schedule/cron.js';
import type { HostClock } from '../store/contract.js';
import { humanMs } from '../schedule/duration.js';

/** Worst first: the order of the summary and of the list. */
export const JOB_STATES = ['overdue', 'paused', 'failing', 'running', 'healthy'] as const;
export type JobStateName = (typeof JOB_STATES)[number];

/** An open window whose latest attempt ended without success. */
const FAILED_OUTCOMES = new Set(['failed', 'lost', 'abandoned']);

/**
 * One word for a job: overdue (a due occurrence past its grace not completed, the latest or an
 * earlier one within the lookback: what `check` calls critical and the alerts fire on), paused
 * (leasejob pause: an operator's decision, shown over what it may be the answer to), failing
 * (an open window whose last attempt failed, was lost, or was abandoned by a crashed runner),
 * running (a live lease), else healthy. The page shows the holder, the pause and the
 * overdue window beside the word whatever it is.
 */
export function stateOf(j: JobState): JobStateName {
  if (j.overdue || j.notCompletedCount > 0) return 'overdue';
  if (j.paused) return 'paused';
  if (j.openWindows.some((w) => FAILED_OUTCOMES.has(w.outcome))) return 'failing';
  if (j.held) return 'running';
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
