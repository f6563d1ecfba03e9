// `leasejob backfill`: every occurrence of a range, in order, under one lease (the sequence path
// `run --catch-up` uses), completed windows skipped; or, with --dry-run, the list of them.
import { DateTime } from 'luxon';
import { monoNow } from '../../clock.js';
import { parseIsoOffset } from '../../schedule/duration.js';
import { DatabaseError, LeasejobError, UsageError } from '../../errors.js';
import { createLogger, type Logger } from '../../log.js';
import { normalizeRunOptions, parseCount, runSecrets, type RawRunFlags, type RunConfig } from '../options.js';
import { chooseStore, openStore, passwordFileWarnings, storeError, type StoreChoice } from '../../store/choice.js';
import type { RunResult, SequenceWindow, WindowEvent } from '../../lease/types.js';
import { windowPending, type JobRow, type LeaseStore, type WindowStates } from '../../store/contract.js';
import { humanMs, renderTable } from '../../monitor/table.js';
import { typicalInterval } from '../../schedule/cron.js';
import { TooManyWindows, windowsBetween, type RangeWindow } from '../../schedule/window-range.js';
import { sequenceReports } from '../reports.js';
import { withRunSession, type RunSession } from '../run-session.js';
import { exitCodeFor } from '../supervise.js';

export interface RawBackfillFlags extends RawRunFlags {
  from?: string;
  to?: string;
  dryRun?: boolean;
  keepGoing?: boolean;
  maxWindows?: string;
  stateFile?: string;
  requireShared?: boolean;
}

/** Without --max-windows: a range past this many windows is refused (a typo in --from, a minutely schedule). */
export const DEFAULT_MAX_WINDOWS = 1_000;
/** What --max-windows may raise it to. */
export const MAX_WINDOWS_LIMIT = 100_000;
/**
 * How many occurrences the range may hold in all (a --window-format coarser than the schedule
 * folds many into one window): walking the schedule costs tens of microseconds each.
 */
const MAX_TICKS = 100_000;

function parseInstant(text: string | undefined, flag: '--from' | '--to', now: Date): Date {
  if (text === undefined)
    throw new UsageError(
      `\`backfill\` needs \`--from\` and \`--to\`: the first and last occurrence times of the range, ISO-8601 with an offset.`,
    );
  if (flag === '--to' && text.trim() === 'now') return now;
  const trimmed = text.trim();
  const parsed = DateTime.fromISO(trimmed, { setZone: true });
  if (!/T.*(?:Z|[+-]\d{2}(?::?\d{2})?)$/i.test(trimmed) || !parsed.isValid) {
    throw new UsageError(
      `Expected \`${flag}\` to be an ISO-8601 time with an offset like 2026-11-01T00:00:00Z or ` +
        `2026-11-01T00:00:00-03:00${flag === '--to' ? ', or now' : ''}, got \`${text}\`.`,
    );
  }
  return parsed.toJSDate();
}

interface BackfillConfig {
  run: RunConfig;
  windows: RangeWindow[];
  dryRun: boolean;
  rerun: boolean;
  keepGoing: boolean;
}

export function normalizeBackfillOptions(
  flags: RawBackfillFlags,
  command: string[],
  env: NodeJS.ProcessEnv = process.env,
  now = new Date(),
): BackfillConfig {
  if (flags.schedule === undefined)
    throw new UsageError(
      '`backfill` needs `--schedule` (and the same --tz, --window-format and --window-offset as the ' +
        "job's `run`): the occurrences come from it.",
    );
  for (const [flag, value] of [
    ['--window', flags.window],
    ['--scheduled-time', flags.scheduledTime],
    ['--max-delay', flags.maxDelay],
    ['--catch-up', flags.catchUp],
  ] as const) {
    if (value !== undefined)
      throw new UsageError(
        `\`${flag}\` does not apply to \`backfill\`: the windows come from --schedule between --from and --to.`,
      );
  }
  // The run flags validated as `run` validates them (the dry run needs no command). JOB_NAME is
  // left out: a Kubernetes Job running a backfill is not an occurrence.
  const asRun = normalizeRunOptions(
    { ...flags, windowFromSchedule: true, onBusy: flags.onBusy ?? 'wait' },
    command.length === 0 && flags.dryRun ? ['true'] : command,
    { ...env, JOB_NAME: undefined },
    now,
  );
  // Not run's default budget (once per occurrence): a backfill is the operator asking for the range again.
  const byDefault = (asRun.policy.maxAttempts ?? 0) < 0;
  const run = byDefault ? { ...asRun, policy: { ...asRun.policy, maxAttempts: undefined } } : asRun;
  const from = parseInstant(flags.from, '--from', now);
  const to = parseInstant(flags.to, '--to', now);
  if (from.getTime() > to.getTime()) {
    throw new UsageError(
      `Expected \`--from\` (${from.toISOString()}) to be at or before \`--to\` (${to.toISOString()}): the range is backwards.`,
    );
  }
  if (to.getTime() > now.getTime()) {
    throw new UsageError(
      `Expected \`--to\` to be no later than now (${now.toISOString()}), got \`${flags.to}\`: an ` +
        `occurrence run before its time would be marked done, ` +
        'and its own run would then skip it. Use `--to now`, and let the schedule run the rest.',
    );
  }
  const max =
    flags.maxWindows !== undefined
      ? parseCount(flags.maxWindows, '--max-windows', MAX_WINDOWS_LIMIT)
      : DEFAULT_MAX_WINDOWS;
  // Refused before walking when plainly too long: the walk itself takes a while (see MAX_TICKS).
  const estimate = (to.getTime() - from.getTime()) / typicalInterval(run.schedule!, from);
  const raiseMax = `, or raise --max-windows (at most ${MAX_WINDOWS_LIMIT})`;
  if (estimate > 2 * MAX_TICKS || (flags.windowFormat === undefined && estimate > 2 * max)) {
    throw new UsageError(
      `the range ${from.toISOString()} to ${to.toISOString()} holds about ${Math.round(estimate)} ` +
        `occurrences of \`--schedule\` ${JSON.stringify(run.schedule!.expression)}, ` +
        `more than ${flags.windowFormat === undefined ? `${max} windows` : `${MAX_TICKS} occurrences`}; ` +
        `narrow it${flags.windowFormat === undefined && max < MAX_WINDOWS_LIMIT ? raiseMax : ''}.`,
    );
  }
  let windows: RangeWindow[];
  try {
    const offset = flags.windowOffset !== undefined ? parseIsoOffset(flags.windowOffset, '--window-offset') : undefined;
    windows = windowsBetween(
      { schedule: run.schedule!, format: flags.windowFormat, offset },
      {
        fromMs: from.getTime(),
        toMs: to.getTime(),
        includeFrom: true,
        includeTo: true,
      },
      { max, maxTicks: MAX_TICKS },
    );
  } catch (err) {
    if (!(err instanceof TooManyWindows)) throw err;
    throw new UsageError(
      `the range ${from.toISOString()} to ${to.toISOString()} holds more than ${max} windows of ` +
        `\`--schedule\` ${JSON.stringify(run.schedule!.expression)}` +
        `${max < MAX_WINDOWS_LIMIT ? `; narrow it, or raise --max-windows (at most ${MAX_WINDOWS_LIMIT})` : '; narrow it'}.`,
    );
  }
  if (windows.length === 0) {
    throw new UsageError(
      `no occurrence of \`--schedule\` ${JSON.stringify(run.schedule!.expression)} in ${run.tz} lies ` +
        `between --from ${from.toISOString()} and --to ${to.toISOString()}.`,
    );
  }
  return { run, windows, dryRun: !!flags.dryRun, rerun: !!flags.rerun, keepGoing: !!flags.keepGoing };
}

export async function backfillCommand(flags: RawBackfillFlags, command: string[]): Promise<number> {
  const c = normalizeBackfillOptions(flags, command);
  const choice = chooseStore({
    databaseUrl: c.run.databaseUrl,
    databaseUrlFile: flags.databaseUrlFile,
    schema: flags.schema,
    stateFile: flags.stateFile,
    requireShared: flags.requireShared,
  });
  const log = createLogger(c.run.logLevel, runSecrets(c.run, choice.secrets), c.run.logFormat);
  passwordFileWarnings.sendTo((message) => log.warn(message));
  return c.dryRun ? dryRun(c, choice) : runBackfill(c, choice, log);
}

const keysOf = (c: BackfillConfig): string[] => c.windows.map((w) => w.key);

/** A window's state, in words. */
function stateOf(s: WindowStates['windows'] extends Map<string, infer V> ? V | undefined : never): string {
  if (s === undefined) return 'new';
  if (s.outcome === 'running' && s.completedAt === null) return 'running or abandoned';
  // attempts 0: final without a run (marked by hand, skipped while paused).
  return s.attempts > 0
    ? `${s.outcome} (attempt ${s.attempts})`
    : s.completedAt !== null
      ? `${s.outcome} (marked or paused)`
      : s.outcome;
}

async function dryRun(c: BackfillConfig, choice: StoreChoice): Promise<number> {
  let store: LeaseStore | undefined;
  try {
    let states: WindowStates = { dbNow: new Date(), registeredAt: undefined, retainedFrom: null, windows: new Map() };
    let paused: JobRow['pause'] | undefined;
    try {
      store = await openStore(choice, { existingOnly: true });
      if (!store.readWindows) throw new UsageError(`\`backfill\` is not supported by this store (${store.kind})`);
      states = await store.readWindows(c.run.name, keysOf(c));
      const job = (await store.readJobRows(c.run.name)).rows[0];
      if (job?.paused) paused = job.pause;
    } catch (err) {
      // No state file yet: nothing has run, every window is new.
      if (!(
        choice.kind === 'sqlite' &&
        err instanceof DatabaseError &&
        err.code === 'E_STATE_FILE' &&
        /no embedded store/.test(err.message)
      ))
        throw err;
    }
    let toRun = 0;
    const rows = c.windows.map((w) => {
      const s = states.windows.get(w.key);
      const { pending, pruned } = windowPending(states, w);
      const run = c.rerun || pending;
      if (run) toRun += 1;
      const state = pruned ? 'pruned (before the retention horizon)' : stateOf(s);
      return [w.key, w.scheduledAt.toISOString(), state, run ? 'run' : 'skip'];
    });
    process.stdout.write(renderTable(['WINDOW', 'SCHEDULED AT', 'STATE', 'ACTION'], rows));
    process.stdout.write(
      `${c.windows.length} window(s) of ${c.run.name}: ${toRun} to run, ${c.windows.length - toRun} ` +
        `completed or pruned (skipped)${c.rerun || toRun === c.windows.length ? '' : '; --rerun runs them too'}. ` +
        `Dry run: nothing was run or written.\n`,
    );
    if (paused !== undefined) {
      const p = paused;
      const since = p
        ? ` since ${p.since.toISOString()}${p.by ? ` by ${p.by}` : ''}` +
          `${p.until ? ` until ${p.until.toISOString()}` : ''}${p.reason ? ` (${p.reason})` : ''}`
        : '';
      process.stdout.write(`The job is paused${since}: ` + 'a backfill now runs nothing (`leasejob resume` first).\n');
    }
    return 0;
  } catch (err) {
    if (err instanceof LeasejobError) throw err;
    throw storeError(err, choice) ?? err;
  } finally {
    await store?.close();
  }
}

/** Progress: a line rewritten in place on a terminal, else one log line per occurrence. */
function progress(log: Logger, tty: boolean) {
  const started = monoNow();
  const counts = {
    completed: 0,
    failed: 0,
    done: 0,
    missed: 0,
    paused: 0,
    'not-due': 0,
    lost: 0,
    exhausted: 0,
    backoff: 0,
  };
  let total = 0;
  let finished = 0;
  let drawn = false;
  const line = (window: string, state: string): void => {
    const elapsed = monoNow() - started;
    const eta = finished > 0 ? (elapsed / finished) * (total - finished) : undefined;
    process.stderr.write(
      `\r\x1b[Kbackfill ${finished}/${total}  ${state} ${window}  elapsed ` +
        `${humanMs(elapsed)}${eta !== undefined ? `  about ${humanMs(eta)} left` : ''}`,
    );
    drawn = true;
  };
  return {
    counts,
    total: () => total,
    onWindow(e: WindowEvent): void {
      if (e.phase === 'planned') {
        total = e.total;
        return;
      }
      if (e.phase === 'start') {
        if (tty) line(e.window.key, 'running');
        return;
      }
      finished += 1;
      counts[e.outcome] += 1;
      const elapsedMs = Math.round(monoNow() - started);
      if (tty) line(e.window.key, e.outcome);
      else {
        log.info(
          {
            done: finished,
            total,
            window: e.window.key,
            outcome: e.outcome,
            elapsedMs,
            etaMs: Math.round((elapsedMs / finished) * (total - finished)),
          },
          'backfill progress',
        );
      }
    },
    /** Ends the line drawn in place, once. */
    end(): void {
      if (drawn) process.stderr.write('\n');
      drawn = false;
    },
  };
}

async function runBackfill(c: BackfillConfig, choice: StoreChoice, log: Logger): Promise<number> {
  const report = progress(log, process.stderr.isTTY === true);
  try {
    return await withRunSession(
      c.run,
      choice,
      log,
      () => openStore(choice),
      (store, session) => backfillWindows(c, store, session, report),
    );
  } finally {
    report.end();
  }
}

/** The windows of the range still to run, under one lease, with progress; what came of them printed. */
async function backfillWindows(
  c: BackfillConfig,
  store: LeaseStore,
  session: RunSession,
  report: ReturnType<typeof progress>,
): Promise<number> {
  const { config, log, signal } = session;
  if (!store.readWindows) throw new UsageError(`\`backfill\` is not supported by this store (${store.kind})`);
  const toRun = async (): Promise<SequenceWindow[]> => {
    const states = await store.readWindows!(config.name, keysOf(c));
    return c.windows
      .filter((w) => c.rerun || windowPending(states, w).pending)
      .map((w) => ({ key: w.key, scheduledAt: w.scheduledAt, rerun: c.rerun, role: 'backfill' as const }));
  };
  const pending = (await toRun()).length;
  // Nothing left to run: no lease taken.
  if (pending === 0) {
    process.stdout.write(
      `backfill ${config.name}: all ${c.windows.length} window(s) completed already; nothing to run (--rerun runs them again).\n`,
    );
    return 0;
  }
  log.info(
    {
      windows: c.windows.length,
      from: c.windows[0]!.key,
      to: c.windows.at(-1)!.key,
      rerun: c.rerun,
      keepGoing: c.keepGoing,
    },
    'backfill planned',
  );
  // --ping-url, --notify-url: each window reported as it ends, as `run --catch-up` does.
  const hooks = await session.loadHooks(store);
  const tell = hooks ? sequenceReports(hooks, config.name, session.supervised, signal) : undefined;
  const result = await session.run(store, {
    spec: await backfillSpec(c, store),
    sequence: {
      plan: async () => ({ run: await toRun() }),
      keepGoing: c.keepGoing,
      detail: { backfill: true },
      onWindow: async (e) => {
        report.onWindow(e);
        await tell?.(e);
      },
    },
  });
  report.end();
  const n = report.counts;
  // Paused (or busy): no lease was taken, nothing planned; what was to run is still open.
  const notStarted = result.status === 'skipped' && (result.reason === 'paused' || result.reason === 'busy');
  const left = notStarted ? pending : Math.max(0, report.total() - n.completed - n.done - n.missed);
  const code = exitCodeFor(result, signal);
  log.info(
    { completed: n.completed, failed: n.failed, alreadyCompleted: n.done, leftOpen: left, exitCode: code },
    'backfill finished',
  );
  process.stdout.write(
    `backfill ${config.name}: ${n.completed} completed, ${n.failed} ` +
      `failed${n.lost > 0 ? `, ${n.lost} lost with the lease` : ''}, ${left} left ` +
      `open${stopWhy(result, signal)}${left > 0 ? '; run the same command again to resume' : ''}.\n`,
  );
  return code;
}

/**
 * What the backfill records in the registry: a job with no schedule yet gets its --schedule (and
 * the run flags given), as `run` records it, expected from the range's first occurrence, so that
 * check, status and the exporter judge what the backfill leaves (docs/occurrence.md). A job whose
 * schedule is registered is left as its own runs record it.
 */
async function backfillSpec(c: BackfillConfig, store: LeaseStore): Promise<RunConfig['spec'] | undefined> {
  const job = (await store.readJobRows(c.run.name)).rows[0];
  if (job?.schedule) return undefined;
  return { ...c.run.spec, expected_from_ms: c.windows[0]!.scheduledAt.getTime() };
}

/** Why a backfill ran nothing or stopped early, for its summary line. */
function stopWhy(result: RunResult<unknown>, signal: AbortSignal): string {
  if (result.status === 'skipped' && result.reason === 'busy') return ` (the lease is busy: ${result.holder} holds it)`;
  if (result.status === 'skipped' && result.reason === 'paused')
    return ' (the job is paused: nothing was run; `leasejob status` says why and until when, `leasejob resume` ends it)';
  return signal.aborted ? ` (stopped by ${String(signal.reason)})` : '';
}
