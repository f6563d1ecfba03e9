// What `run` and `backfill` share around the lease: the signals that stop the child, the store
// opened and closed, the child of each window (superviseChild), its reports, and the driver
// errors turned into exit 69. A command parses its flags, calls runWithLease through a session
// and prints what came of it.
import { LeasejobError } from '../errors.js';
import type { Logger } from '../log.js';
import type { ChildResult } from '../lease/child.js';
import { runWithLease } from '../lease/runner.js';
import type { RunOptions, RunResult } from '../lease/types.js';
import { storeError, type StoreChoice } from '../store/choice.js';
import type { LeaseStore } from '../store/contract.js';
import type { RunConfig } from './options.js';
import { loadHooks, reportUnfinished } from './reports.js';
import { exitCodeFor, settleRun, superviseChild, type Supervised } from './supervise.js';
import { RunTrace, traceExportWish } from './trace-spans.js';

/** How long closing the connection may take once a signal told leasejob to stop. */
const CLOSE_AFTER_SIGNAL_MS = 250;

/** Signals that make leasejob stop its child, release the lease and exit 128+N. */
const FORWARDED = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

export interface RunSession {
  readonly config: RunConfig;
  readonly log: Logger;
  /** Aborted by SIGTERM, SIGINT or SIGHUP (its reason the signal's name). */
  readonly signal: AbortSignal;
  readonly supervised: Supervised;
  /** --ping-url, --notify-url: the hooks, loaded once (undefined without either). */
  loadHooks(store: LeaseStore): Promise<Supervised['hooks']>;
  /**
   * runWithLease with this command's lease settings and its child as the task; what differs
   * (the window, the registry's spec, a sequence) is given. A window whose start was pinged is
   * reported ended when it throws.
   */
  run(
    store: LeaseStore,
    opts: Pick<RunOptions, 'window' | 'spec' | 'sequence' | 'onTry'>,
  ): Promise<RunResult<ChildResult>>;
}

/**
 * Runs `body` with the store `open` gives and a session; closes the store whatever happens, a
 * signal's wait bounded. `body`'s driver errors become DatabaseError (exit 69).
 */
export async function withRunSession<T>(
  config: RunConfig,
  choice: StoreChoice,
  log: Logger,
  open: () => Promise<LeaseStore>,
  body: (store: LeaseStore, session: RunSession) => Promise<T>,
): Promise<T> {
  const cancel = new AbortController();
  const databaseUrl = choice.kind === 'postgresql' ? choice.source.connectionString : undefined;
  const supervised: Supervised = {
    childRunning: false,
    childStarted: false,
    sharedStore: choice.kind === 'postgresql',
    trace: runTrace(config, log),
  };
  const pendingReports: Array<Promise<unknown>> = [];
  const onSignal = (sig: NodeJS.Signals): void => {
    if (supervised.childRunning) log.warn({ signal: sig }, 'signal received, stopping child');
    else log.warn({ signal: sig }, 'signal received');
    cancel.abort(sig);
  };
  const session: RunSession = {
    config,
    log,
    signal: cancel.signal,
    supervised,
    async loadHooks(store) {
      if (config.pingUrl === undefined && config.notifyUrl === undefined) return undefined;
      supervised.hooks ??= await loadHooks(config, store, log, pendingReports, supervised);
      return supervised.hooks;
    },
    async run(store, opts) {
      const window = opts.sequence ? undefined : opts.window?.key;
      supervised.trace?.acquiring(window);
      try {
        const result = await runWithLease(
          store,
          {
            name: config.name,
            ttlMs: config.ttlMs,
            renewIntervalMs: config.renewIntervalMs,
            killGraceMs: config.killGraceMs,
            onBusy: config.onBusy,
            waitTimeoutMs: config.waitTimeoutMs,
            maxRuntimeMs: config.maxRuntimeMs,
            ...config.policy,
            signal: cancel.signal,
            output: () => supervised.tail?.read(),
            ...opts,
          },
          (ctx) => superviseChild(config, ctx, databaseUrl, log, supervised),
          log,
        );
        supervised.trace?.ended(result, exitCodeOrUndefined(result, cancel.signal), window);
        return result;
      } catch (err) {
        supervised.trace?.ended(
          { status: 'failed', error: err, generation: '', attempt: 0, released: false },
          undefined,
          window,
        );
        await reportUnfinished(supervised, config.name, err, cancel.signal);
        throw err;
      }
    },
  };
  for (const s of FORWARDED) process.on(s, onSignal);
  let store: LeaseStore | undefined;
  try {
    store = await open();
    return await body(store, session);
  } catch (err) {
    if (err instanceof LeasejobError) throw err;
    throw storeError(err, choice) ?? err;
  } finally {
    for (const s of FORWARDED) process.off(s, onSignal);
    await settleRun(supervised, pendingReports);
    // Told to stop: a statement still waiting on a silent connection is not waited for long.
    await store?.close(cancel.signal.aborted ? CLOSE_AFTER_SIGNAL_MS : undefined);
    // Last: the lease is given back and the store closed before a collector is waited for (bounded).
    await supervised.trace?.export(log, cancel.signal.aborted);
  }
}

/** The run's spans, when OTEL_* asks for an export; a setting leasejob cannot honour is said once. */
function runTrace(config: RunConfig, log: Logger): RunTrace | undefined {
  const wish = traceExportWish();
  if (!wish.export && wish.warning) log.warn(`${wish.warning}; traces are not exported`);
  return wish.export ? new RunTrace(config.name, wish, config.policy.maxAttempts) : undefined;
}

function exitCodeOrUndefined(result: RunResult<ChildResult>, signal: AbortSignal): number | undefined {
  try {
    return exitCodeFor(result, signal);
  } catch {
    return undefined;
  }
}
