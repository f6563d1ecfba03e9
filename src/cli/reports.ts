// What a run tells about each window it handles, to --ping-url and --notify-url: its start (from
// superviseChild), its end, and the occurrences a sequence records missed. `run` reports its one
// window once the lease is released; a sequence (run --catch-up, backfill) each as it ends.
import { ExitCode, LeasejobError } from '../errors.js';
import type { Logger } from '../log.js';
import type { ChildResult } from '../lease/child.js';
import type { RunHooks, WindowEnd } from '../lease/run-hooks.js';
import type { MissedGroup, RunResult, WindowEvent } from '../lease/types.js';
import { EVENT_TIMEOUT_MS, type LeaseStore } from '../store/contract.js';
import type { RunConfig } from './options.js';
import { exitCodeFor, type Supervised } from './supervise.js';
import { traceLink } from '../monitor/trace-link.js';

/** The ping and webhook module, only when a URL is given: a failed request is a warning and a counted event. */
export async function loadHooks(
  config: RunConfig,
  store: LeaseStore,
  log: Logger,
  pending: Array<Promise<unknown>>,
  s: Supervised,
): Promise<RunHooks> {
  const { RunHooks } = await import('../lease/run-hooks.js');
  const { packageVersion } = await import('../package-root.js');
  const template = config.traceLinkTemplate;
  return new RunHooks(
    {
      pingUrl: config.pingUrl,
      notifyUrl: config.notifyUrl,
      userAgent: `leasejob/${packageVersion()}`,
      traceLink: template === undefined ? undefined : (traceId: string) => traceLink(template, traceId),
    },
    (f) => {
      log.warn(
        { target: f.target, stage: f.stage, err: f.error },
        f.target === 'ping' ? 'ping failed' : 'notification failed',
      );
      pending.push(
        store
          .recordEvent({
            job: config.name,
            kind: 'notify-failed',
            window: s.ctx?.window ?? config.window?.key,
            owner: s.ctx?.owner,
            hostTime: new Date(),
            detail: { target: f.target, stage: f.stage, error: f.error },
            answerTimeoutMs: EVENT_TIMEOUT_MS,
          })
          .catch(() => {}),
      );
    },
  );
}

/** The window a report is about: the run's own, or (backfill, --catch-up) each window in turn. */
interface ReportedWindow {
  job: string;
  window?: string | undefined;
  scheduledAt?: Date | undefined;
}

export const windowOf = (config: RunConfig): ReportedWindow => ({
  job: config.name,
  window: config.window?.key,
  scheduledAt: config.window?.scheduledAt,
});
/** The window the child was last started for (a sequence's). */
export const windowOfRun = (s: Supervised, job: string): ReportedWindow => ({
  job,
  window: s.ctx?.window,
  scheduledAt: s.ctx?.scheduledAt,
});

function windowEnd(
  w: ReportedWindow,
  s: Supervised,
  outcome: WindowEnd['outcome'],
  exitCode: number | undefined,
): WindowEnd {
  return {
    job: w.job,
    window: w.window,
    scheduledAt: w.scheduledAt,
    attempt: s.ctx?.attempt,
    generation: s.ctx?.fenceToken,
    owner: s.ctx?.owner,
    outcome,
    exitCode,
    childExitCode: s.result?.exitCode,
    signal: s.result?.signal,
    output: s.tail?.read(),
    startedAt: s.startedAt,
    finishedAt: new Date(),
  };
}

/**
 * A window's end to the ping URL and the webhook; a skip (busy, done, cancelled before the child)
 * says nothing. `code`: what leasejob exits with for it (undefined: unknown, pinged as /fail).
 * Called once per window that runWithLease handled (superviseChild has sent its start).
 */
export async function report(
  hooks: RunHooks,
  w: ReportedWindow,
  s: Supervised,
  result: RunResult<ChildResult>,
  code: number | undefined,
  signal: AbortSignal,
): Promise<void> {
  s.endPending = false;
  let outcome: WindowEnd['outcome'];
  if (result.status === 'completed') outcome = 'completed';
  else if (result.status === 'skipped') {
    if (result.reason !== 'missed') return;
    outcome = 'missed';
  } else {
    const kind = result.aborted?.kind;
    outcome = kind === 'lease-lost' || kind === 'deadline' ? 'lost' : 'failed';
  }
  // A missed window never reached superviseChild: nothing of the supervision is its.
  await hooks.finished(windowEnd(w, outcome === 'missed' ? unsupervised(s) : s, outcome, code), signal);
}

const unsupervised = (s: Supervised): Supervised => ({
  childRunning: false,
  childStarted: false,
  sharedStore: s.sharedStore,
});

/**
 * The reports of a sequence (run --catch-up, backfill), given to it as onWindow: each window's
 * end as `run` reports its one window, awaited before the next window starts (a check sees
 * start, end, start, end, each pair with its own run id); the occurrences recorded missed before
 * the first window, one webhook POST per reason (at most two per run, whatever their number).
 */
export function sequenceReports(
  hooks: RunHooks,
  job: string,
  s: Supervised,
  signal: AbortSignal,
): (e: WindowEvent) => Promise<void> {
  return async (e) => {
    if (e.phase === 'planned') {
      await Promise.all(e.missedGroups.map((g) => hooks.finished(missedBatch(job, g), signal)));
      return;
    }
    if (e.phase !== 'end') return;
    const result = e.result as RunResult<ChildResult>;
    let code: number | undefined;
    try {
      code = exitCodeFor(result, signal);
    } catch {
      code = undefined;
    }
    // A window that never reached superviseChild (not due, the lease gone at its claim) has
    // nothing of the previous window's supervision.
    const ran = s.ctx?.window === e.window.key;
    await report(
      hooks,
      { job, window: e.window.key, scheduledAt: e.window.scheduledAt },
      ran ? s : unsupervised(s),
      result,
      code,
      signal,
    );
    s.endPending = false;
  };
}

/** The webhook's report of occurrences recorded missed together: named by the newest, with the range and the count. */
function missedBatch(job: string, g: MissedGroup & { count: number }): WindowEnd {
  const oldest = g.windows[0]!;
  const newest = g.windows.at(-1)!;
  return {
    job,
    window: newest.key,
    scheduledAt: newest.scheduledAt,
    outcome: 'missed',
    finishedAt: new Date(),
    missed: { reason: g.reason, count: g.count, oldest, newest },
  };
}

/** runWithLease threw while a window's start was pinged: its end is reported too (healthchecks.io would otherwise wait for its timeout). */
export async function reportUnfinished(s: Supervised, job: string, err: unknown, signal: AbortSignal): Promise<void> {
  if (!s.hooks || !s.endPending) return;
  s.endPending = false;
  await s.hooks.finished(
    windowEnd(windowOfRun(s, job), s, 'failed', err instanceof LeasejobError ? err.exitCode : ExitCode.internal),
    signal,
  );
}
