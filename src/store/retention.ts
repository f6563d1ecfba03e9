// Retention: what `leasejob prune` deletes and keeps, job by job in small batches, with
// progress as it goes. The SQL of each batch is the store's (postgres/retention.ts,
// sqlite/retention.ts), the command's flags and output cli/commands/prune.ts's.
import { hostname } from 'node:os';
import { monoNow } from '../clock.js';
import { humanMs, parseIsoOffset } from '../schedule/duration.js';
import { UsageError } from '../errors.js';
import type { LeaseStore, RetentionRow, RetentionStore } from './contract.js';
import { windowStart } from '../schedule/window-range.js';

/**
 * Rows per batch: each batch is one transaction of about this many deletions (milliseconds on
 * PostgreSQL; on the embedded store every run waits for the batch in progress, so it stays short).
 */
export const PRUNE_BATCH_ROWS = 2_000;

/** Jobs whose horizon one statement raises (a few milliseconds of retention rows, which runs do not lock). */
const HORIZON_CHUNK = 1_000;

export interface PruneOptions {
  olderThanMs: number;
  name?: string | undefined;
  dryRun: boolean;
  batchRows?: number;
  onProgress?: (p: PruneProgress) => void;
}

export interface PruneProgress {
  jobsDone: number;
  jobs: number;
  events: number;
  windows: number;
  batches: number;
  elapsedMs: number;
}

export interface PruneSummary extends PruneProgress {
  dryRun: boolean;
  /** Windows scheduled before it are gone (but each job's latest completed and the open ones). */
  horizon: Date;
  /** The jobs something was (or would be) deleted of. */
  jobsPruned: number;
  /** Hosts not seen since the horizon, forgotten (RetentionStore.pruneHosts); 0 when pruning one job. */
  hosts: number;
}

/** The longest time, besides --max-delay, a registered job may still run a past occurrence. */
function lateRunMs(job: RetentionRow): number {
  return job.maxDelayMs ?? 0;
}

/**
 * Refuses a horizon that would call an occurrence missed that a job may still run: shorter
 * than a job's --max-delay. Nothing is written before this check.
 */
export function checkHorizon(jobs: RetentionRow[], olderThanMs: number, olderThan: string): void {
  const longest = jobs.reduce<RetentionRow | undefined>(
    (a, j) => (a === undefined || lateRunMs(j) > lateRunMs(a) ? j : a),
    undefined,
  );
  if (longest !== undefined && lateRunMs(longest) > olderThanMs) {
    throw new UsageError(
      `Expected \`--older-than\` to be at least the longest --max-delay of the jobs it prunes (job ` +
        `"${longest.name}": ${humanMs(lateRunMs(longest))}), got \`${olderThan}\`: ` +
        'an occurrence that job may still run would be recorded as missed. Prune with a longer ' +
        "--older-than (or lower that job's --max-delay).",
    );
  }
}

/**
 * A job's horizon: `horizon` moved back to the start of the window it falls in. With a coarse
 * --window-format (a day of hourly ticks), the window's earliest tick decides whether it was
 * pruned: a late tick of a day whose first tick is older than the horizon must not run the day
 * again, so that day is kept, and judged, whole. The registry says how the job names windows.
 */
export function jobHorizon(job: RetentionRow, horizon: Date): Date {
  if (job.windowFormat === null) return horizon;
  const offset = job.windowOffset !== null ? parseIsoOffset(job.windowOffset, '--window-offset') : undefined;
  return new Date(windowStart(horizon.getTime(), { format: job.windowFormat, offset, tz: job.tz ?? 'UTC' }));
}

export function retentionOf(store: LeaseStore): RetentionStore {
  if (!store.retention) throw new UsageError(`this store (${store.location}) does not support prune`);
  return store.retention;
}

/** Prune every job of `jobs` (read with `dbNow` from the store) older than `opts.olderThanMs`. */
export async function pruneJobs(
  store: LeaseStore,
  jobs: RetentionRow[],
  dbNow: Date,
  opts: PruneOptions,
): Promise<PruneSummary> {
  const r = retentionOf(store);
  const limit = opts.batchRows ?? PRUNE_BATCH_ROWS;
  const horizon = new Date(dbNow.getTime() - opts.olderThanMs);
  const owner = `${hostname()}:${process.pid}:prune`;
  const started = monoNow();
  const p: PruneProgress = { jobsDone: 0, jobs: jobs.length, events: 0, windows: 0, batches: 0, elapsedMs: 0 };
  let jobsPruned = 0;
  const report = (): void => {
    p.elapsedMs = monoNow() - started;
    opts.onProgress?.({ ...p });
  };
  // Every job's horizon first, HORIZON_CHUNK at a time: before any window of it goes, so a
  // late duplicate of one is refused. One statement per chunk (of jobs with the same horizon)
  // instead of one per job.
  const horizons = new Map(jobs.map((j) => [j.name, jobHorizon(j, horizon)]));
  if (!opts.dryRun) {
    const byHorizon = new Map<number, string[]>();
    for (const [name, h] of horizons) {
      const names = byHorizon.get(h.getTime());
      if (names) names.push(name);
      else byHorizon.set(h.getTime(), [name]);
    }
    for (const [ms, names] of byHorizon)
      for (let i = 0; i < names.length; i += HORIZON_CHUNK)
        await r.raiseHorizon(names.slice(i, i + HORIZON_CHUNK), new Date(ms));
  }
  for (const job of jobs) {
    const horizon = horizons.get(job.name)!;
    // The events of the lease's current generation stay: its owner's finish (and its retry)
    // and a takeover's lost-lease record look for them.
    const eventsBefore = job.leaseAcquiredAt && job.leaseAcquiredAt < horizon ? job.leaseAcquiredAt : horizon;
    if (opts.dryRun) {
      const n = await r.countPrunable(job.name, horizon, eventsBefore);
      p.events += n.events;
      p.windows += n.windows;
      p.batches += 1;
      if (n.events + n.windows > 0) jobsPruned += 1;
    } else {
      let windows = 0;
      let events = 0;
      let throughSeq = job.prunedThroughSeq;
      for (let more = true; more;) {
        const b = await r.pruneWindows(job.name, horizon, limit);
        windows += b.deleted;
        p.windows += b.deleted;
        p.batches += 1;
        more = b.more;
        report();
      }
      for (let more = true; more;) {
        const b = await r.pruneEvents(job.name, eventsBefore, limit);
        events += b.deleted;
        p.events += b.deleted;
        p.batches += 1;
        throughSeq = b.throughSeq;
        more = b.more;
        report();
      }
      if (events + windows > 0) {
        jobsPruned += 1;
        // In the job's own log, so that `history` (and its --json) says what went and why.
        await store.recordEvent({
          job: job.name,
          kind: 'pruned',
          owner,
          hostTime: new Date(),
          detail: { retained_from: horizon.toISOString(), events, windows, pruned_through_seq: throughSeq },
        });
      }
    }
    p.jobsDone += 1;
    report();
  }
  // Hosts belong to no job: forgotten by a prune of every job only.
  const hosts = opts.name === undefined ? await r.pruneHosts(horizon, opts.dryRun) : 0;
  p.elapsedMs = monoNow() - started;
  return { ...p, dryRun: opts.dryRun, horizon, jobsPruned, hosts };
}
