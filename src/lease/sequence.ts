// runSequenceHeld: several windows one after another under one lease already held (run
// --catch-up, backfill): each claimed, run and recorded on its own, the lease renewed
// throughout by one keeper and released once at the end.
import { MAX_AHEAD_MS, monoNow, type OffsetMeasurement, type stamp } from '../clock.js';
import { LeaseUnavailableError } from '../errors.js';
import { keepRunLease, startRunLease } from './keeper.js';
import type { Logger } from '../log.js';
import { finishDetail, finishWithRetry, recordLoss, recordOutput, exitCodeOf, stoppedExitCode } from './finish.js';
import type {
  AbortReason,
  MissedGroup,
  RunOptions,
  RunResult,
  SequenceOptions,
  SequencePlan,
  TaskContext,
  WindowEvent,
} from './types.js';
import { EVENT_TIMEOUT_MS, isTransient, type LeaseStore as Store } from '../store/contract.js';

interface Held {
  owner: string;
  generation: string;
  sent: ReturnType<typeof stamp>;
  received: ReturnType<typeof stamp>;
  timing: { ttlMs: number; renewIntervalMs: number; killGraceMs: number };
  offset: OffsetMeasurement | undefined;
  dbNow?: Date | undefined;
}

export async function runSequenceHeld<T>(
  store: Store,
  opts: RunOptions & { sequence: SequenceOptions },
  task: (ctx: TaskContext) => Promise<T>,
  log: Logger,
  held: Held,
): Promise<RunResult<T>> {
  const seq = opts.sequence;
  const { owner, generation } = held;
  const claimWindow = store.claimWindow!.bind(store);
  const finishWindow = store.finishWindow!.bind(store);
  const eventTimeoutMs = Math.min(EVENT_TIMEOUT_MS, held.timing.renewIntervalMs / 2);
  const startedMono = monoNow();
  /** The database's time now, from the acquire's answer and the monotonic clock since. */
  const dbNowAt = (): Date =>
    new Date((held.dbNow ?? new Date(held.received.wall)).getTime() + (monoNow() - held.received.mono));

  /** Why the whole sequence stops (lease lost, a signal); the running window is aborted with it. */
  let stopped: AbortReason | undefined;
  let current: { controller: AbortController; aborted?: AbortReason } | undefined;
  const abortWindow = (reason: AbortReason): void => {
    if (!current || current.aborted) return;
    current.aborted = reason;
    current.controller.abort(reason);
  };
  const stop = (reason: AbortReason): void => {
    stopped ??= reason;
    abortWindow(reason);
  };

  const keeper = keepRunLease(
    store,
    { job: opts.name, owner, generation },
    held.timing,
    held.sent,
    log,
    eventTimeoutMs,
    stop,
  );
  const unwire = startRunLease(keeper, held, opts, stop, log);
  const tell = async (e: WindowEvent): Promise<void> => {
    try {
      await seq.onWindow?.(e);
    } catch (err) {
      log.warn({ err: (err as Error).message, phase: e.phase }, 'window event handler failed');
    }
  };

  let firstFailure: RunResult<T> | undefined;
  let lastCompleted: RunResult<T> | undefined;
  /** The lease is known to be gone (a claim or a finish said so): nothing to release. */
  let gone = false;
  let thrown: { err: unknown } | undefined;
  const lostResult = (detail: string): RunResult<T> => ({
    status: 'failed',
    error: new LeaseUnavailableError(`lease lost: ${detail}`),
    generation,
    attempt: 1,
    aborted: { kind: 'lease-lost', detail, graceMs: 0 },
    released: false,
  });
  try {
    const plan: SequencePlan = stopped ? { run: [] } : await seq.plan(dbNowAt());
    let missedCount = 0;
    const missedGroups: Array<MissedGroup & { count: number }> = [];
    for (const group of plan.missed ?? []) {
      if (stopped || group.windows.length === 0) continue;
      const n = await store.recordMissed!({
        job: opts.name,
        owner,
        generation,
        windows: group.windows,
        reason: group.reason,
        hostTime: new Date(),
      });
      if (n === undefined) {
        gone = true;
        stop({
          kind: 'lease-lost',
          detail: 'recording missed occurrences found the lease taken, expired or released',
          graceMs: 0,
        });
        break;
      }
      missedCount += n;
      if (n > 0) missedGroups.push({ ...group, count: n });
      log.warn(
        {
          count: n,
          reason: group.reason,
          oldest: group.windows[0]!.key,
          newest: group.windows.at(-1)!.key,
          ...group.fields,
        },
        group.reason === 'max-delay'
          ? 'occurrences older than --max-delay recorded as missed'
          : 'occurrences beyond --catch-up-limit recorded as missed',
      );
    }
    const total = plan.run.length;
    await tell({ phase: 'planned', total, missed: missedCount, missedGroups });

    for (const [index, w] of plan.run.entries()) {
      if (stopped) break;
      const wlog = log.child({ window: w.key });
      const aheadMs = w.scheduledAt !== undefined ? w.scheduledAt.getTime() - dbNowAt().getTime() : 0;
      if (aheadMs > MAX_AHEAD_MS) {
        const detail = `occurrence ${w.scheduledAt!.toISOString()} is ${Math.round(aheadMs / 1000)} s ahead of the database clock`;
        wlog.error(
          { generation, scheduledAt: w.scheduledAt, aheadMs: Math.round(aheadMs) },
          'occurrence not due by the database clock: not started, window left open',
        );
        const notDue: RunResult<T> = {
          status: 'failed',
          error: new LeaseUnavailableError(`not started: ${detail}; check this host's clock (NTP)`, 'E_NOT_DUE'),
          generation,
          attempt: 1,
          aborted: { kind: 'not-due', detail, graceMs: 0 },
          released: false,
        };
        firstFailure ??= notDue;
        await tell({ phase: 'end', index, total, window: w, generation, outcome: 'not-due', result: notDue });
        break;
      }
      const claim = await claimWindow({
        job: opts.name,
        owner,
        generation,
        window: w.key,
        scheduledAt: w.scheduledAt,
        rerun: w.rerun ?? false,
        maxDelayMs: w.maxDelayMs,
        hostTime: new Date(),
        detail: { ...seq.detail, ...(w.role ? { role: w.role } : {}) },
      });
      if (claim.outcome === 'not-held') {
        gone = true;
        wlog.warn({ generation }, 'lease was no longer held at claim; the rest of the windows stay open');
        const lost = lostResult('not held at claim');
        firstFailure ??= lost;
        await tell({ phase: 'end', index, total, window: w, generation, outcome: 'lost', result: lost });
        break;
      }
      if (claim.outcome === 'done') {
        wlog.info({ completedAt: claim.completedAt }, 'window already completed');
        await tell({
          phase: 'end',
          index,
          total,
          window: w,
          generation,
          outcome: 'done',
          result: { status: 'skipped', reason: 'done', completedAt: claim.completedAt },
        });
        continue;
      }
      if (claim.outcome === 'missed') {
        wlog.warn({ scheduledAt: w.scheduledAt, maxDelayMs: w.maxDelayMs }, 'window missed');
        await tell({
          phase: 'end',
          index,
          total,
          window: w,
          generation,
          outcome: 'missed',
          result: { status: 'skipped', reason: 'missed' },
        });
        continue;
      }
      const attempt = claim.attempt ?? 1;
      wlog.info(
        { generation, attempt, scheduledAt: w.scheduledAt, role: w.role, index: index + 1, total },
        'window claimed',
      );
      await tell({ phase: 'start', index, total, window: w, attempt, generation });

      const win: { controller: AbortController; aborted?: AbortReason } = { controller: new AbortController() };
      current = win;
      // Between the claim and here the lease may have been lost, or a signal come.
      if (stopped) abortWindow(stopped);
      const runtimeTimer =
        opts.maxRuntimeMs !== undefined
          ? setTimeout(() => {
              wlog.warn({ maxRuntimeMs: opts.maxRuntimeMs }, 'max runtime exceeded');
              abortWindow({ kind: 'max-runtime', graceMs: opts.killGraceMs });
            }, opts.maxRuntimeMs)
          : undefined;
      const windowStarted = monoNow();
      let value: T | undefined;
      let error: unknown;
      let ok = false;
      try {
        value = await task({
          signal: win.controller.signal,
          fenceToken: generation,
          idempotencyKey: `${opts.name}:${w.key}`,
          owner,
          window: w.key,
          attempt,
          scheduledAt: w.scheduledAt,
        });
        ok = win.aborted === undefined;
      } catch (err) {
        error = err;
      } finally {
        clearTimeout(runtimeTimer);
        current = undefined;
      }
      const durationMs = monoNow() - windowStarted;
      const outcome = ok ? 'completed' : 'failed';
      // --record-output: this window's tail, while the lease is held (as runHeld does).
      await recordOutput(store, opts, w.key, generation, eventTimeoutMs, wlog);
      // One code in the ledger, the event and the exit (runner.ts stoppedExitCode, issue 20).
      const exitCode = ok ? 0 : (stoppedExitCode(win.aborted) ?? exitCodeOf(error));
      let r: { held: boolean };
      try {
        r = await finishWithRetry(
          { finish: finishWindow, isTransient: store.isTransient?.bind(store) },
          {
            job: opts.name,
            owner,
            generation,
            window: w.key,
            outcome,
            hostTime: new Date(),
            exitCode,
            detail: finishDetail(attempt, durationMs, win.aborted?.kind, undefined),
          },
          () => keeper.remainingMs(),
          wlog,
          opts.signal,
        );
      } catch (err) {
        wlog.error(
          { err: (err as Error).message, generation },
          isTransient(store, err)
            ? 'could not learn whether the outcome was recorded; if it was not, the lease expires by itself'
            : 'could not record outcome; the lease expires by itself',
        );
        gone = true;
        const unknown: RunResult<T> = {
          status: 'failed',
          error: ok ? err : error,
          generation,
          attempt,
          released: false,
          ...(win.aborted ? { aborted: win.aborted } : {}),
        };
        firstFailure ??= unknown;
        await tell({
          phase: 'end',
          index,
          total,
          window: w,
          generation,
          outcome: 'lost',
          attempt,
          durationMs,
          exitCode,
          error,
          result: unknown,
        });
        break;
      }
      if (!r.held) {
        gone = true;
        wlog.warn({ generation }, 'lease was no longer held at finish; outcome not recorded');
        const lost: RunResult<T> = win.aborted
          ? {
              status: 'failed',
              error: error ?? new Error('task aborted'),
              generation,
              attempt,
              aborted: win.aborted,
              released: false,
            }
          : lostResult('not held at finish');
        firstFailure ??= lost;
        await tell({
          phase: 'end',
          index,
          total,
          window: w,
          generation,
          outcome: 'lost',
          attempt,
          durationMs,
          exitCode,
          error,
          result: lost,
        });
        break;
      }
      // A failure at warn, as runner.ts says it (a crontab's --log-level warn prints it).
      wlog[ok ? 'info' : 'warn'](
        { generation, attempt, outcome, ...(ok ? {} : { exitCode }) },
        ok ? 'window completed' : 'window left open',
      );
      const result: RunResult<T> = ok
        ? { status: 'completed', value: value as T, generation, attempt }
        : {
            status: 'failed',
            error: error ?? new Error('task aborted'),
            generation,
            attempt,
            released: false,
            ...(win.aborted ? { aborted: win.aborted } : {}),
          };
      await tell({
        phase: 'end',
        index,
        total,
        window: w,
        generation,
        outcome,
        attempt,
        durationMs,
        exitCode,
        error,
        result,
      });
      if (result.status === 'completed') {
        lastCompleted = result;
        continue;
      }
      firstFailure ??= result;
      if (!seq.keepGoing || stopped) {
        if (index + 1 < total) {
          // Set by the keeper or a signal meanwhile (closures the narrowing above cannot see).
          const why = stopped as AbortReason | undefined;
          if (why)
            log.info(
              { left: total - index - 1, stoppedBy: why.kind },
              'stopped: the later windows stay open for the next run',
            );
          else log.info({ left: total - index - 1 }, 'a window failed: the later windows stay open for the next run');
        }
        break;
      }
    }
  } catch (err) {
    // A statement of the sequence failed (the database went away): the lease is still given
    // back below if it can be, and the error is the run's.
    thrown = { err };
  } finally {
    keeper.stop();
    unwire();
  }

  let released = false;
  if (!gone) {
    try {
      const r = await finishWithRetry(
        store,
        {
          job: opts.name,
          owner,
          generation,
          outcome: 'none',
          hostTime: new Date(),
          detail: finishDetail(1, monoNow() - startedMono, stopped?.kind, keeper.offsetToRecord()),
        },
        () => keeper.remainingMs(),
        log,
        opts.signal,
      );
      released = r.held;
      if (r.held) log.info({ generation }, 'lease released');
      else log.warn({ generation }, 'lease was no longer held at finish; outcome not recorded');
      const doubtful = stopped?.kind === 'lease-lost' || stopped?.kind === 'deadline';
      if (doubtful)
        await recordLoss(
          store,
          { job: opts.name, window: undefined, owner, generation },
          r.held ? stopped : undefined,
          keeper.renewFailures(),
          eventTimeoutMs,
        );
      if (!r.held && !doubtful) firstFailure ??= lostResult('not held at the release');
    } catch (err) {
      log.error({ err: (err as Error).message, generation }, 'could not record outcome; the lease expires by itself');
    }
  }

  if (thrown) throw thrown.err;
  if (firstFailure) return firstFailure.status === 'failed' ? { ...firstFailure, released } : firstFailure;
  if (stopped?.kind === 'cancelled') return { status: 'skipped', reason: 'cancelled' };
  if (stopped)
    return {
      status: 'failed',
      error: new LeaseUnavailableError(`lease lost: ${'detail' in stopped ? stopped.detail : stopped.kind}`),
      generation,
      attempt: 1,
      aborted: stopped,
      released,
    };
  if (lastCompleted) return lastCompleted;
  return { status: 'skipped', reason: 'done' };
}
