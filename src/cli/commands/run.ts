// `leasejob run`: the flags parsed, the window (or with --catch-up the earlier ones first) run
// under the lease through a run session (run-session.ts), the outcome reported and mapped to
// the exit code.
import { monoNow } from '../../clock.js';
import { UsageError } from '../../errors.js';
import { kubernetesNameFor } from '../../names.js';
import { createLogger, type Logger } from '../../log.js';
import { catchUpPlan, earlierWindows, findCatchUp, isEmpty } from '../../lease/catch-up.js';
import type { SequenceOptions } from '../../lease/types.js';
import { chooseStore, openStore, passwordFileWarnings, type StoreChoice } from '../../store/choice.js';
import type { LeaseStore } from '../../store/contract.js';
import { Reach, noteReach } from '../../startup/start-reach.js';
import { normalizeRunOptions, runSecrets, type RawRunFlags, type RunConfig } from '../options.js';
import { report, sequenceReports, windowOf, windowOfRun } from '../reports.js';
import { withRunSession, type RunSession } from '../run-session.js';
import { prewarmGuard } from '../../lease/guarded-spawn.js';
import { checkWorkingDirectory, exitCodeFor } from '../supervise.js';

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
        databaseUrlFile: flags.databaseUrlFile,
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
  const log = createLogger(config.logLevel, runSecrets(config, choice.secrets), config.logFormat);
  passwordFileWarnings.sendTo((message) => log.warn(message));
  // A warning, not an error: crontab lines written before it keep running (and exiting) as they did.
  if (config.scheduleWithoutWindow) log.warn({ job: config.name }, SCHEDULE_WITHOUT_WINDOW);
  noteKubernetesName(config.name, log);
  // The child's guard starts while the store opens and the lease is asked for.
  prewarmGuard(config.recordOutputBytes !== undefined);
  return withRunSession(config, choice, log, () => early?.store ?? openStore(choice), runWindows);
}

/**
 * A name the chart could not give a CronJob (a space, capitals): said once, at info, with the
 * setting that lets a CronJob share this lease, for the day this job moves to Kubernetes. Not
 * inside Kubernetes, where the chart's leaseName already gave it.
 */
function noteKubernetesName(name: string, log: Logger): void {
  const label = kubernetesNameFor(name);
  if (label === undefined || process.env.KUBERNETES_SERVICE_HOST) return;
  log.info(
    { job: name, chartName: label },
    'job name is not a Kubernetes name: in the Helm chart give it as jobs[].leaseName, beside a DNS-label jobs[].name ' +
      '(e.g. the chartName field), so that the CronJob shares this lease, its windows and history',
  );
}

const SCHEDULE_WITHOUT_WINDOW =
  'no window (--schedule without --window-from-schedule): one run at a time, but every trigger runs the command ' +
  'again; add --window-from-schedule for once per occurrence, or --mutex-only to say this is meant';

/** The run under the lease, once the store is open: its window, or the catch-up's sequence. */
async function runWindows(store: LeaseStore, session: RunSession): Promise<number> {
  const { config, log, signal, supervised } = session;
  log.info({ store: store.kind, location: store.location, occurrence: config.window?.source }, 'using store');
  warnIfLateWallClock(config, log);
  const sequence = await catchUpSequence(store, config, log);
  const hooks = await session.loadHooks(store);
  // Each window of a catch-up is reported as it ends, as a run reports its one.
  if (hooks && sequence) sequence.onWindow = sequenceReports(hooks, config.name, supervised, signal);
  // With --retries, each try of the run's one window is reported as it ends, as a sequence's windows are.
  const onTry =
    hooks && config.policy.retries > 0 ? sequenceReports(hooks, config.name, supervised, signal) : undefined;
  const runOnce = (seq: SequenceOptions | undefined) =>
    session.run(store, { window: config.window, spec: config.spec, sequence: seq, onTry: seq ? undefined : onTry });
  let result = await runOnce(sequence);
  // A sequence's acquire names no window, so a pause written since the read above did not
  // record this run's own occurrence: acquiring it alone does (skipped, paused).
  if (sequence && result.status === 'skipped' && result.reason === 'paused' && !signal.aborted)
    result = await runOnce(undefined);
  noteReach(supervised.childStarted ? Reach.whole : result.status === 'skipped' ? Reach.answered : Reach.none);
  let code: number | undefined;
  let failure: unknown;
  try {
    code = exitCodeFor(result, signal);
  } catch (err) {
    failure = err;
  }
  // A sequence reported each window as it ended (sequenceReports), and --retries each try.
  if (hooks && ((sequence === undefined && onTry === undefined) || supervised.endPending)) {
    const t = monoNow();
    const w = sequence ? windowOfRun(supervised, config.name) : windowOf(config);
    await report(hooks, w, supervised, result, code, signal);
    log.debug({ durationMs: Math.round(monoNow() - t) }, 'reports sent');
  }
  if (failure !== undefined) throw failure;
  return code!;
}

/**
 * With --catch-up: the sequence of the earlier windows still open, then this one; undefined
 * when there are none (the run is then as without --catch-up). Looked at once before the lease
 * (a read), and again once it is held, when no other runner can change them.
 */
async function catchUpSequence(
  store: LeaseStore,
  config: RunConfig,
  log: Logger,
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

/** An occurrence from the wall clock this much older than the start is worth a word. */
const LATE_WALL_CLOCK_MS = 5 * 60_000;

/**
 * Cron fires in its host's zone (or CRON_TZ) and leasejob reads --schedule in --tz, UTC unless
 * given: when they differ, every run takes the latest tick in --tz, hours old, and its window is
 * one `check` never expects. A late start looks the same, so this only says so.
 */
function warnIfLateWallClock(config: RunConfig, log: Logger): void {
  const w = config.window;
  if (w?.source !== 'wall-clock' || w.scheduledAt === undefined) return;
  const lateMs = Date.now() - w.scheduledAt.getTime();
  if (lateMs < LATE_WALL_CLOCK_MS) return;
  const lateMinutes = Math.round(lateMs / 60_000);
  log.warn(
    { window: w.key, scheduledAt: w.scheduledAt.toISOString(), lateMinutes, tz: config.tz },
    `the latest occurrence of --schedule in ${config.tz} is ${lateMinutes} min old: if cron fires ` +
      `this job in another time zone (the host's, or CRON_TZ), give that zone as --tz`,
  );
}
