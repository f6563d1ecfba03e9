// The child of one window under the lease: started with the window's environment, stopped when
// the lease is in doubt, its whole process group waited for; and the exit code a run's result
// maps to. `run` and `backfill` (each window of a sequence) share it.
import { constants } from 'node:os';
import { monoNow } from '../clock.js';
import { ExitCode, LeasejobError, UsageError } from '../errors.js';
import type { Logger } from '../log.js';
import { startChild, SpawnError, type ChildHandle, type ChildResult } from '../lease/child.js';
import { stoppedExitCode } from '../lease/finish.js';
import { safetyMarginMs } from '../lease/keeper.js';
import { TailBuffer } from '../lease/output-tail.js';
import type { RunHooks } from '../lease/run-hooks.js';
import type { AbortReason, RunResult, TaskContext } from '../lease/types.js';
import { typicalInterval } from '../schedule/cron.js';
import { MAX_TIMER_MS } from '../schedule/duration.js';
import { attemptSpanId, traceIdOf, traceparent } from '../trace-context.js';
import type { RunConfig } from './options.js';
import type { RunTrace } from './trace-spans.js';

/**
 * The warning a run that takes long gives while it runs: past --expect-duration's maximum when
 * one is given (the operator said it may take that long), else past half the schedule interval
 * (the next occurrence may find this one still running). Past Node's timer limit a timer would
 * fire at once: schedules over ~50 days get no warning.
 */
function longRunTimer(config: RunConfig, log: Logger, childPid: number | undefined): NodeJS.Timeout | undefined {
  const expectMaxMs = config.spec.expect_max_ms;
  if (typeof expectMaxMs === 'number') {
    if (expectMaxMs > MAX_TIMER_MS) return undefined;
    return setTimeout(() => log.warn({ childPid, expectMaxMs }, "run passed --expect-duration's maximum"), expectMaxMs);
  }
  const halfInterval = config.schedule ? typicalInterval(config.schedule, new Date()) / 2 : undefined;
  if (halfInterval === undefined || halfInterval > MAX_TIMER_MS) return undefined;
  return setTimeout(
    () => log.warn({ childPid, halfIntervalMs: halfInterval }, 'run passed half the schedule interval'),
    halfInterval,
  );
}

/** The child exited non-zero or by a signal: the window stays open. */
class ChildFailedError extends Error {
  constructor(readonly result: ChildResult) {
    super(result.signal ? `child killed by ${result.signal}` : `child exited with code ${result.exitCode}`);
  }
  get childCode(): number {
    return this.result.code;
  }
}

/** What the run path shares with the child's supervision (one window at a time). */
export interface Supervised {
  childRunning: boolean;
  childStarted: boolean;
  sharedStore: boolean;
  hooks?: RunHooks | undefined;
  /** --record-output: the current window's child's output. */
  tail?: TailBuffer | undefined;
  child?: ChildHandle | undefined;
  startedAt?: Date | undefined;
  ctx?: TaskContext | undefined;
  result?: ChildResult | undefined;
  /** The current window's start was pinged and its end not yet reported. */
  endPending?: boolean | undefined;
  /** The run's spans (recorded only when OTEL_* asks for an export). */
  trace?: RunTrace | undefined;
}

/**
 * Before the store closes: the failed pings' events (each bounded by its own timeout), and what
 * the child wrote, on its way to our stdout and stderr (--record-output: a reader that never
 * reads cannot hold the exit for long).
 */
export async function settleRun(s: Supervised, pendingReports: Array<Promise<unknown>>): Promise<void> {
  await Promise.all(pendingReports);
  await s.child?.outputFlushed(OUTPUT_FLUSH_LIMIT_MS);
}

/** How long the child's output may still take to reach our stdout and stderr once it has exited. */
const OUTPUT_FLUSH_LIMIT_MS = 10_000;
/** After the child's group is gone, how long its stdout and stderr may stay open (a process outside the group). */
const OUTPUT_CLOSE_LIMIT_MS = 1_000;

export function childEnv(
  config: RunConfig,
  ctx: TaskContext,
  databaseUrl: string | undefined,
  sharedStore: boolean,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
  // A leasejob inside the child, left without our database URL, must not fall back to a
  // one-host state file: its lease would guard nothing across hosts. It says so (exit 64).
  if (sharedStore && !env.LEASEJOB_REQUIRE_SHARED) env.LEASEJOB_REQUIRE_SHARED = '1';
  // Least privilege: the child does not get our database URL unless asked.
  delete env.LEASEJOB_DATABASE_URL;
  delete env.DATABASE_URL;
  // Nor the ping and webhook URLs: secrets of leasejob's, not the child's.
  delete env.LEASEJOB_PING_URL;
  delete env.LEASEJOB_NOTIFY_URL;
  // Nor the password of a connection made from the libpq variables (PGHOST, PGUSER, ...),
  // which a child using libpq would pick up. The other PG* variables hold no secret.
  if (!config.passDatabaseUrl) delete env.PGPASSWORD;
  if (config.passDatabaseUrl && databaseUrl) env.DATABASE_URL = databaseUrl;
  Object.assign(env, {
    FENCE_TOKEN: ctx.fenceToken,
    IDEMPOTENCY_KEY: ctx.idempotencyKey,
    LEASEJOB_NAME: config.name,
    LEASEJOB_ATTEMPT: String(ctx.attempt),
    LEASEJOB_OWNER: ctx.owner,
    LEASEJOB_SCHEMA: config.schema,
  });
  // --user: the user's own name and home, as runuser sets them (not root's).
  if (config.runAs?.name !== undefined) {
    env.USER = env.LOGNAME = config.runAs.name;
    env.HOME = config.runAs.home ?? '/';
  }
  if (ctx.window !== undefined) env.LEASEJOB_WINDOW = ctx.window;
  else delete env.LEASEJOB_WINDOW;
  if (ctx.scheduledAt) env.LEASEJOB_SCHEDULED_AT = ctx.scheduledAt.toISOString();
  else delete env.LEASEJOB_SCHEDULED_AT;
  // W3C trace context for batch jobs: the occurrence's trace, this attempt's span. A TRACESTATE
  // leasejob was given is passed on as it is; its own TRACEPARENT is replaced (linked in the spans).
  const traceId = traceIdOf(config.name, ctx.window, ctx.fenceToken);
  env.TRACEPARENT = traceparent(traceId, attemptSpanId(config.name, ctx.window, ctx.fenceToken, ctx.attempt));
  return env;
}

export async function superviseChild(
  config: RunConfig,
  ctx: TaskContext,
  databaseUrl: string | undefined,
  log: Logger,
  supervised: Supervised,
): Promise<ChildResult> {
  // This window's, from here: nothing of an earlier window's (backfill, --catch-up) is reported
  // or recorded with it, even when it never starts.
  supervised.ctx = ctx;
  supervised.startedAt = undefined;
  supervised.result = undefined;
  supervised.tail = undefined;
  // The lease may have been lost (or its stop point passed) while we got here: never start then.
  ctx.signal.throwIfAborted();
  supervised.trace?.attemptStarted(ctx);
  supervised.tail = config.recordOutputBytes !== undefined ? new TailBuffer(config.recordOutputBytes) : undefined;
  let child: ChildHandle;
  try {
    child = await startChild(config.command, config.args, {
      env: childEnv(config, ctx, databaseUrl, supervised.sharedStore),
      capture: supervised.tail,
      runAs: config.runAs,
      // The guard stops the child there by itself if we cannot (killed, stopped, stalled).
      stopAtMs: ctx.deadline?.stopAtMono(),
      graceMs: config.killGraceMs,
    });
  } catch (err) {
    // Said here, or a crontab sees only exit 127 or 126.
    if (err instanceof SpawnError) log.error({ command: config.command, exitCode: err.exitCode }, err.message);
    throw err;
  }
  const started = monoNow();
  const unfollow = ctx.deadline?.onStopAtChange((stopAtMs) => child.setStopAt(stopAtMs));
  // A renewal answered while the guard was starting moved the stop point after the guard was told.
  if (ctx.deadline) child.setStopAt(ctx.deadline.stopAtMono());
  supervised.trace?.childStarted(child.pid);
  supervised.childRunning = true;
  supervised.childStarted = true;
  supervised.child = child;
  supervised.startedAt = new Date();
  supervised.endPending = supervised.hooks !== undefined;
  supervised.hooks?.started({
    job: config.name,
    window: ctx.window,
    scheduledAt: ctx.scheduledAt,
    attempt: ctx.attempt,
    generation: ctx.fenceToken,
    owner: ctx.owner,
  });
  // After SIGKILL, the group's last members are waited for within the margin kept before expiry.
  const settleMs = safetyMarginMs(config.ttlMs);
  log.info(
    { childPid: child.pid, command: config.command, generation: ctx.fenceToken, attempt: ctx.attempt },
    'child started',
  );
  const onAbort = (): void => {
    const reason = ctx.signal.reason as AbortReason;
    const first =
      reason.kind === 'cancelled' && typeof reason.reason === 'string' ? (reason.reason as NodeJS.Signals) : 'SIGTERM';
    log.info(
      { childPid: child.pid, reason: reason.kind, signal: first, graceMs: Math.round(reason.graceMs) },
      'stopping child',
    );
    void child.stop({ graceMs: reason.graceMs, first, settleMs });
  };
  ctx.signal.addEventListener('abort', onAbort, { once: true });
  if (ctx.signal.aborted) onAbort();
  const overlapTimer = longRunTimer(config, log, child.pid);
  const result = await child.exited;
  clearTimeout(overlapTimer);
  // At info even when it failed: the window's outcome line says the failure at warn once no try
  // is left (a crontab at --log-level warn mails that line alone, and nothing for a try retried).
  log.info(
    {
      childPid: child.pid,
      exitCode: result.exitCode,
      signal: result.signal,
      durationMs: Math.round(monoNow() - started),
    },
    'child exited',
  );
  // What the child started in its group is part of the run: nothing of it may work on past the
  // lease. Left behind after a normal exit, it is stopped like the child (SIGTERM, the grace,
  // SIGKILL); after a stop, stop() resolves only once the whole group is gone. The abort listener
  // stays on meanwhile, so a lease lost during this wait still shortens the grace.
  if (child.groupAlive()) {
    if (!ctx.signal.aborted)
      log.warn(
        { childPid: child.pid, graceMs: config.killGraceMs },
        'child exited but left processes in its group; stopping them',
      );
    await child.stop({ graceMs: config.killGraceMs, settleMs });
    if (child.groupAlive())
      log.warn({ childPid: child.pid }, 'processes in the child group outlived SIGKILL (uninterruptible I/O?)');
    else log.info({ childPid: child.pid }, 'child process group gone');
  }
  ctx.signal.removeEventListener('abort', onAbort);
  unfollow?.();
  child.release();
  supervised.childRunning = false;
  supervised.result = result;
  supervised.trace?.childExited(result);
  // The whole tail, before the runner records it with the outcome.
  if (supervised.tail) await child.outputClosed(OUTPUT_CLOSE_LIMIT_MS);
  if (result.code !== 0) throw new ChildFailedError(result);
  return result;
}

export function exitCodeFor(result: RunResult<ChildResult>, cancel: AbortSignal): number {
  switch (result.status) {
    case 'completed':
      return ExitCode.ok;
    case 'skipped':
      if (cancel.aborted) return 128 + (constants.signals[cancel.reason as NodeJS.Signals] ?? 15);
      return ExitCode.ok;
    case 'failed': {
      const kind = result.aborted?.kind;
      // Stopped by leasejob (lease lost, --max-runtime, our own SIGTERM/SIGINT/SIGHUP): the code
      // the ledger records too (runner.ts), even if the child chose to exit 0 or was SIGKILLed.
      const stopped = stoppedExitCode(result.aborted);
      if (stopped !== undefined) return stopped;
      if (kind === 'cancelled') return 128 + (constants.signals[cancel.reason as NodeJS.Signals] ?? 15);
      if (result.error instanceof ChildFailedError) return result.error.childCode;
      if (result.error instanceof LeasejobError) return result.error.exitCode;
      throw result.error;
    }
  }
}

/** The child starts in our working directory: one removed under us is said before any lease is taken. */
export function checkWorkingDirectory(): void {
  try {
    process.cwd();
  } catch (err) {
    throw new UsageError(
      `the current directory no longer exists (${(err as NodeJS.ErrnoException).code ?? 'error'}); cd to one that does and run again`,
    );
  }
}
