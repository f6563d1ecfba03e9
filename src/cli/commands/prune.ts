// `leasejob prune`: validate, prune job by job with progress on stderr, a summary on stdout.
import { parseDuration } from '../../schedule/duration.js';
import { UsageError } from '../../errors.js';
import { validateName } from '../../names.js';
import { checkHorizon, pruneJobs, retentionOf, type PruneProgress, type PruneSummary } from '../../store/retention.js';
import { humanMs } from '../../monitor/table.js';
import { unknownJob, withStore, type DbFlags } from '../with-store.js';

/** A retention that long is a policy (records kept for years), not a typo as it is for a TTL. */
const MAX_OLDER_THAN_MS = 100 * 366 * 86_400_000;
/** How often progress is said when stderr is not a terminal (a log line each time). */
const PROGRESS_LOG_MS = 10_000;
/** How often the terminal's progress line is redrawn. */
const PROGRESS_TTY_MS = 250;

export interface PruneFlags extends DbFlags {
  olderThan?: string;
  name?: string;
  dryRun?: boolean;
  batchSize?: string;
  vacuum?: boolean;
}

const rate = (rows: number, ms: number): number => (ms > 0 ? Math.round((rows * 1000) / ms) : 0);

export async function pruneCommand(flags: PruneFlags): Promise<number> {
  if (flags.olderThan === undefined)
    throw new UsageError(
      'Expected `--older-than` (e.g. 90d): events and finished windows older than that are deleted.',
    );
  const olderThanMs = parseDuration(flags.olderThan, '--older-than', MAX_OLDER_THAN_MS);
  const name = flags.name !== undefined ? validateName(flags.name) : undefined;
  const batchRows = flags.batchSize === undefined ? undefined : Number(flags.batchSize);
  if (batchRows !== undefined && !(Number.isInteger(batchRows) && batchRows >= 1 && batchRows <= 100_000)) {
    throw new UsageError(
      `Expected \`--batch-size\` to be a whole number from 1 to 100000, got \`${flags.batchSize}\`.`,
    );
  }
  if (flags.vacuum && flags.dryRun) throw new UsageError('Use either `--vacuum` or `--dry-run`, not both.');
  const permissionHint =
    "prune deletes rows of the schema's tables, so run it as the schema owner (the role that ran `leasejob migrate`), not a runner role";
  return withStore(
    flags,
    async (store, log, choice) => {
      if (flags.vacuum && choice.kind !== 'sqlite') {
        throw new UsageError(
          '`--vacuum` is for the embedded store; on PostgreSQL autovacuum makes the space reusable ' +
            '(VACUUM FULL or pg_repack give it back to the file system).',
        );
      }
      const r = retentionOf(store);
      const { dbNow, jobs } = await r.read(name);
      if (name !== undefined && jobs.length === 0) throw unknownJob(name, store.location);
      checkHorizon(jobs, olderThanMs, flags.olderThan!);

      const tty = process.stderr.isTTY === true;
      let lastSaid = 0;
      const onProgress = (p: PruneProgress): void => {
        const rows = p.events + p.windows;
        if (tty) {
          if (p.elapsedMs - lastSaid < PROGRESS_TTY_MS && p.jobsDone < p.jobs) return;
          lastSaid = p.elapsedMs;
          process.stderr.write(
            `\rpruning: ${p.jobsDone}/${p.jobs} jobs, ${p.events} events, ${p.windows} windows, ${rate(rows, p.elapsedMs)} rows/s `,
          );
        } else if (p.elapsedMs - lastSaid >= PROGRESS_LOG_MS) {
          lastSaid = p.elapsedMs;
          log.info(
            {
              jobsDone: p.jobsDone,
              jobs: p.jobs,
              events: p.events,
              windows: p.windows,
              rowsPerSecond: rate(rows, p.elapsedMs),
            },
            'prune progress',
          );
        }
      };
      const summary = await pruneJobs(store, jobs, dbNow, {
        olderThanMs,
        name,
        dryRun: !!flags.dryRun,
        batchRows,
        onProgress,
      });
      if (tty) process.stderr.write('\n');
      const space = !flags.dryRun && r.reclaimSpace ? await r.reclaimSpace({ full: !!flags.vacuum }) : undefined;
      if (space?.mode === 'none') {
        log.warn(
          { location: store.location },
          'this state file predates incremental vacuum: freed pages are reused but the file does not ' +
            'shrink; run `leasejob prune --vacuum` once at a quiet time (it rewrites the file and holds runs ' +
            'meanwhile)',
        );
      }
      log.info(
        {
          dryRun: summary.dryRun,
          horizon: summary.horizon.toISOString(),
          jobs: summary.jobs,
          jobsPruned: summary.jobsPruned,
          events: summary.events,
          windows: summary.windows,
          hosts: summary.hosts,
          batches: summary.batches,
          durationMs: Math.round(summary.elapsedMs),
          rowsPerSecond: rate(summary.events + summary.windows, summary.elapsedMs),
          ...(space ? { vacuum: space.mode, freedBytes: space.freedBytes } : {}),
        },
        summary.dryRun ? 'prune dry run finished' : 'prune finished',
      );
      process.stdout.write(renderSummary(summary, flags.olderThan!, space?.freedBytes));
      return 0;
    },
    { permissionHint },
  );
}

function renderSummary(s: PruneSummary, olderThan: string, freedBytes: number | undefined): string {
  const rows = s.events + s.windows;
  const verb = s.dryRun ? 'would delete (dry run, nothing written)' : 'deleted';
  return (
    [
      `horizon: ${s.horizon.toISOString()} (--older-than ${olderThan}); ${s.jobsPruned} of ${s.jobs} job(s) had rows older`,
      `events:  ${s.events} ${verb}`,
      `windows: ${s.windows} ${verb}`,
      `hosts:   ${s.hosts} not seen since the horizon ` +
        `${s.dryRun ? 'would be forgotten' : 'forgotten'} (clock readings; their event counts kept under ` +
        `"(pruned)")`,
      s.dryRun
        ? `counted in ${humanMs(s.elapsedMs)}`
        : `${rows} rows in ${(s.elapsedMs / 1000).toFixed(1)}s, ${rate(rows, s.elapsedMs)} rows/s, ${s.batches} batches`,
      ...(freedBytes !== undefined && freedBytes > 0 ? [`state file: ${freedBytes} bytes given back`] : []),
    ].join('\n') + '\n'
  );
}
