// `leasejob run`: the child process under runWithLease, signals forwarded, exit code mapped.
import { constants } from 'node:os';
import { monoNow } from '../../clock.js';
import { passwordFileWarnings } from '../../store/postgres/connection.js';
import {
  startChild,
  parentDeathSignalSupport,
  SpawnError,
  type ChildHandle,
  type ChildResult,
} from '../../lease/child.js';
import { MAX_TIMER_MS } from '../../schedule/duration.js';
import { ExitCode, LeasejobError, UsageError } from '../../errors.js';
import { createLogger } from '../../log.js';
import { safetyMarginMs } from '../../lease/keeper.js';
import { normalizeRunOptions, runSecrets, type RawRunFlags, type RunConfig } from '../options.js';
import { TailBuffer } from '../../lease/output-tail.js';
import type { RunHooks, WindowEnd } from '../../lease/run-hooks.js';
import { EVENT_TIMEOUT_MS } from '../../store/contract.js';
import { stoppedExitCode } from '../../lease/finish.js';
import { runWithLease } from '../../lease/runner.js';
import { typicalInterval } from '../../schedule/cron.js';
import { chooseStore, openStore, type StoreChoice } from '../../store/choice.js';
import type { LeaseStore } from '../../store/contract.js';
import { Reach, noteReach } from '../../startup/start-reach.js';
import { catchUpPlan, earlierWindows, findCatchUp, isEmpty } from '../../lease/catch-up.js';
import type {
  AbortReason,
  MissedGroup,
  RunResult,
  SequenceOptions,
  TaskContext,
  WindowEvent,
} from '../../lease/types.js';
import { storeError } from './admin.js';

/** How long closing the connection may take once a signal told leasejob to stop. */
const CLOSE_AFTER_SIGNAL_MS = 250;

/** Signals that make leasejob stop its child, release the lease and exit 128+N. */
const FORWARDED = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

/** The child exited non-zero or by a signal: the window stays open. */
class ChildFailedError extends Error {
  constructor(readonly result: ChildResult) {
    super(result.signal ? `child killed by ${result.signal}` : `child exited with code ${result.exitCode}`);
  }
  get childCode(): number {
    return this.result.code;
  }
}

/**
 * `early`: the store openStoreEarly() chose and opened from these flags, already connecting.
 * It is closed here whatever happens, bad flags included.
 */
export async function runCommand(
  flags: RawRunFlags & { stateFile?: string; requireShared?: boolean },
  command: string[],
  early?: { choice: StoreChoice; store: Promise<LeaseStore> },
): Promise<number> {
  let config: RunConfig;
  let choice: StoreChoice;
  try {
    config = normalizeRunOptions(flags, command);
    checkWorkingDirectory();
    choice =
      early?.choice ??
      chooseStore({
        databaseUrl: config.databaseUrl,
        schema: flags.schema,
        stateFile: flags.stateFile,
        requireShared: flags.requireShared,
      });
  } catch (err) {
    // Not awaited: a connection still being opened (a black-holed database) must not delay
    // the usage error; the process exits right after and the server sees the socket close.
    void early?.store.then(
      (s) => s.close(),
      () => {},
    );
    throw err;
  }
  const log = createLogger(config.logLevel, runSecrets(config, choice.secrets));
  passwordFileWarnings.sendTo((message) => log.warn(message));
  const databaseUrl = choice.kind === 'postgresql' ? choice.source.connectionString : undefined;

  const cancel = new AbortController();
  const supervised: Supervised = {
    childRunning: false,
    childStarted: false,
    sharedStore: choice.kind === 'postgresql',
  };
  const onSignal = (sig: NodeJS.Signals): void => {
    if (supervised.childRunning) log.warn({ signal: sig }, 'signal received, stopping child');
    else log.warn({ signal: sig }, 'signal received');
    cancel.abort(sig);
  };
  for (const s of FORWARDED) process.on(s, onSignal);

  let store: LeaseStore | undefined;
  const pendingReports: Array<Promise<unknown>> = [];
  try {
    store = await (early?.store ?? openStore(choice));
    if (parentDeathSignalSupport() === 'none')
      log.warn(
        'no parent-death signal on this platform: if leasejob is SIGKILLed its child runs on until the lease would have expired',
      );
    log.info({ store: store.kind, location: store.location, occurrence: config.window?.source }, 'using store');
    warnIfLateWallClock(config, log);
    const sequence = await catchUpSequence(store, config, log);
    if (config.pingUrl !== undefined || config.notifyUrl !== undefined) {
      supervised.hooks = await loadHooks(config, store, log, pendingReports, supervised);
      // Each window of a catch-up is reported as it ends, as a run reports its one.
      if (sequence) sequence.onWindow = sequenceReports(supervised.hooks, config.name, supervised, cancel.signal);
    }
    const runOnce = (seq: SequenceOptions | undefined) =>
      runWithLease(
        store!,
        {
          name: config.name,
          ttlMs: config.ttlMs,
          renewIntervalMs: config.renewIntervalMs,
          killGraceMs: config.killGraceMs,
          window: config.window,
          onBusy: config.onBusy,
          waitTimeoutMs: config.waitTimeoutMs,
          maxRuntimeMs: config.maxRuntimeMs,
          signal: cancel.signal,
          spec: config.spec,
          sequence: seq,
          output: () => supervised.tail?.read(),
        },
        (ctx) => superviseChild(config, ctx, databaseUrl, log, supervised),
        log,
      );
    let result: RunResult<ChildResult>;
    try {
      result = await runOnce(sequence);
      // A sequence's acquire names no window, so a pause written since the read above did not
      // record this run's own occurrence: acquiring it alone does (skipped, paused).
      if (sequence && result.status === 'skipped' && result.reason === 'paused' && !cancel.signal.aborted)
        result = await runOnce(undefined);
    } catch (err) {
      await reportUnfinished(supervised, config.name, err, cancel.signal);
      throw err;
    }
    noteReach(supervised.childStarted ? Reach.whole : result.status === 'skipped' ? Reach.answered : Reach.none);
    let code: number | undefined;
    let failure: unknown;
    try {
      code = exitCodeFor(result, cancel.signal);
    } catch (err) {
      failure = err;
    }
    // A sequence reported each window as it ended (sequenceReports).
    if (supervised.hooks && (sequence === undefined || supervised.endPending)) {
      const t = monoNow();
      await report(
        supervised.hooks,
        sequence ? windowOfRun(supervised, config.name) : windowOf(config),
        supervised,
        result,
        code,
        cancel.signal,
      );
      log.debug({ durationMs: Math.round(monoNow() - t) }, 'reports sent');
    }
    if (failure !== undefined) throw failure;
    return code!;
  } catch (err) {
    if (err instanceof LeasejobError) throw err;
    throw storeError(err, choice) ?? err;
  } finally {
    for (const s of FORWARDED) process.off(s, onSignal);
    await settleRun(supervised, pendingReports);
    // Told to stop: a statement still waiting on a silent connection is not waited for long.
    await store?.close(cancel.signal.aborted ? CLOSE_AFTER_SIGNAL_MS : undefined);
  }
}

/**
 * With --catch-up: the sequence of the earlier windows still open, then this one; undefined
 * when there are none (the run is then as without --catch-up). Looked at once before the lease
 * (a read), and again once it is held, when no other runner can change them.
 */
async function catchUpSequence(
  store: LeaseStore,
  config: RunConfig,
  log: ReturnType<typeof createLogger>,
): Promise<SequenceOptions | undefined> {
  const settings = config.catchUp;
  const current = config.window;
  if (settings === undefined || current === undefined || current.scheduledAt === undefined) return undefined;
  if (!store.readWindows) throw new UsageError(`\`--catch-up\` is not supported by this store (${store.kind})`);
  // The schedule is walked once; the ledger is read before the lease and again under it.
  const earlier = earlierWindows(settings.naming, { key: current.key, scheduledAt: current.scheduledAt }, settings);
  const find = (dbNow?: Date) => findCatchUp(store, config.name, earlier, settings, current.maxDelayMs, dbNow);
  const first = await find();
  if (isEmpty(first)) {
    log.debug({ catchUpMs: settings.windowMs }, 'catch-up: no earlier window open');
    return undefined;
  }
  // Paused: this run acquires its own window alone, so that its skip records it (see runCommand).
  if ((await store.readJobRows(config.name)).rows[0]?.paused) return undefined;
  log.info(
    {
      toRun: first.run.length,
      beyondLimit: first.beyondLimit.length,
      tooOld: first.tooOld.length,
      catchUpLimit: settings.limit,
    },
    'catch-up: earlier windows open',
  );
  return {
    plan: async (dbNow) => catchUpPlan(await find(dbNow), current, settings, current.maxDelayMs),
    detail: { catch_up: true },
  };
}

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
  if (ctx.window !== undefined) env.LEASEJOB_WINDOW = ctx.window;
  else delete env.LEASEJOB_WINDOW;
  if (ctx.scheduledAt) env.LEASEJOB_SCHEDULED_AT = ctx.scheduledAt.toISOString();
  else delete env.LEASEJOB_SCHEDULED_AT;
  return env;
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

/** runWithLease threw while a window's start was pinged: its end is reported too (healthchecks.io would otherwise wait for its timeout). */
export async function reportUnfinished(s: Supervised, job: string, err: unknown, signal: AbortSignal): Promise<void> {
  if (!s.hooks || !s.endPending) return;
  s.endPending = false;
  await s.hooks.finished(
    windowEnd(windowOfRun(s, job), s, 'failed', err instanceof LeasejobError ? err.exitCode : ExitCode.internal),
    signal,
  );
}

/** How long the child's output may still take to reach our stdout and stderr once it has exited. */
const OUTPUT_FLUSH_LIMIT_MS = 10_000;
/** After the child's group is gone, how long its stdout and stderr may stay open (a process outside the group). */
const OUTPUT_CLOSE_LIMIT_MS = 1_000;

/** The ping and webhook module, only when a URL is given: a failed request is a warning and a counted event. */
export async function loadHooks(
  config: RunConfig,
  store: LeaseStore,
  log: ReturnType<typeof createLogger>,
  pending: Array<Promise<unknown>>,
  s: Supervised,
): Promise<RunHooks> {
  const { RunHooks } = await import('../../lease/run-hooks.js');
  const { packageVersion } = await import('../../package-root.js');
  return new RunHooks(
    { pingUrl: config.pingUrl, notifyUrl: config.notifyUrl, userAgent: `leasejob/${packageVersion()}` },
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
export interface ReportedWindow {
  job: string;
  window?: string | undefined;
  scheduledAt?: Date | undefined;
}

const windowOf = (config: RunConfig): ReportedWindow => ({
  job: config.name,
  window: config.window?.key,
  scheduledAt: config.window?.scheduledAt,
});
/** The window the child was last started for (a sequence's). */
const windowOfRun = (s: Supervised, job: string): ReportedWindow => ({
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

export async function superviseChild(
  config: RunConfig,
  ctx: TaskContext,
  databaseUrl: string | undefined,
  log: ReturnType<typeof createLogger>,
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
  supervised.tail = config.recordOutputBytes !== undefined ? new TailBuffer(config.recordOutputBytes) : undefined;
  let child: ChildHandle;
  try {
    child = await startChild(config.command, config.args, {
      env: childEnv(config, ctx, databaseUrl, supervised.sharedStore),
      capture: supervised.tail,
    });
  } catch (err) {
    // Said here, or a crontab sees only exit 127 or 126.
    if (err instanceof SpawnError) log.error({ command: config.command, exitCode: err.exitCode }, err.message);
    throw err;
  }
  const started = monoNow();
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
  // Past half the schedule interval, the next occurrence may find this one still running.
  const halfInterval = config.schedule ? typicalInterval(config.schedule, new Date()) / 2 : undefined;
  // (Past Node's timer limit a timer fires at once: schedules over ~50 days get no warning.)
  const overlapTimer =
    halfInterval !== undefined && halfInterval <= MAX_TIMER_MS
      ? setTimeout(
          () =>
            log.warn({ childPid: child.pid, halfIntervalMs: halfInterval }, 'run passed half the schedule interval'),
          halfInterval,
        )
      : undefined;
  const result = await child.exited;
  clearTimeout(overlapTimer);
  // A failed child at warn: `--log-level warn` (a crontab's) then prints failures, and only them.
  log[result.code === 0 ? 'info' : 'warn'](
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
  supervised.childRunning = false;
  supervised.result = result;
  // The whole tail, before the runner records it with the outcome.
  if (supervised.tail) await child.outputClosed(OUTPUT_CLOSE_LIMIT_MS);
  if (result.code !== 0) throw new ChildFailedError(result);
  return result;
}

/** An occurrence from the wall clock this much older than the start is worth a word. */
const LATE_WALL_CLOCK_MS = 5 * 60_000;

/**
 * Cron fires in its host's zone (or CRON_TZ) and leasejob reads --schedule in --tz, UTC unless
 * given: when they differ, every run takes the latest tick in --tz, hours old, and its window is
 * one `check` never expects. A late start looks the same, so this only says so.
 */
function warnIfLateWallClock(config: RunConfig, log: ReturnType<typeof createLogger>): void {
  const w = config.window;
  if (w?.source !== 'wall-clock' || w.scheduledAt === undefined) return;
  const lateMs = Date.now() - w.scheduledAt.getTime();
  if (lateMs < LATE_WALL_CLOCK_MS) return;
  const lateMinutes = Math.round(lateMs / 60_000);
  log.warn(
    { window: w.key, scheduledAt: w.scheduledAt.toISOString(), lateMinutes, tz: config.tz },
    `the latest occurrence of --schedule in ${config.tz} is ${lateMinutes} min old: if cron fires this job in another time zone (the host's, or CRON_TZ), give that zone as --tz`,
  );
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
function checkWorkingDirectory(): void {
  try {
    process.cwd();
  } catch (err) {
    throw new UsageError(
      `the current directory no longer exists (${(err as NodeJS.ErrnoException).code ?? 'error'}); cd to one that does and run again`,
    );
  }
}
