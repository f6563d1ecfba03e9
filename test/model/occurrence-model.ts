// The reference model of one job's occurrences (docs/occurrence.md): per occurrence its attempts
// and how its latest ended, what a trigger may do with it, and which occurrences are due and not
// completed at a given time. Pure: no store, no clock of its own; the model-based tests drive it
// beside the real CLI and compare.

/** How an occurrence's latest attempt ended, or how it was closed. */
export type OccStatus =
  | 'none' // no attempt yet (perhaps skipped: a skip is not an attempt)
  | 'completed' // a child exited 0 (run or --rerun)
  | 'failed' // a child exited non-zero: the backoff applies
  | 'crashed' // its holder was SIGKILLed and its lease not yet taken over or released
  | 'lost' // crashed, then released or taken over
  | 'replaced' // stopped by a later occurrence's --on-busy replace
  | 'marked-done'
  | 'marked-skipped'
  | 'paused-skipped' // a trigger while paused, the occurrence without a row: final
  | 'missed'; // a trigger before the retention horizon, the occurrence without a row: a row, not final

export interface Occ {
  /** Attempts the store counts: child starts by any path, failed or not. */
  attempts: number;
  /** The attempts that failed (a child's non-zero exit): what run's default budget counts. */
  failed: number;
  status: OccStatus;
  /** Order of its closing (completed, marked, skipped by a pause): prune keeps the latest. */
  closedSeq?: number;
}

export interface JobModel {
  /** --max-attempts; 0: none given, run's default budget (-(retries + 1) failed attempts). */
  maxAttempts: number;
  schedule: string;
  /** When the current schedule took effect (ms); its occurrences before it are never due. */
  scheduleFrom: number;
  registeredAt: number;
  paused: boolean;
  /** [since, until) of each pause; until null while paused. */
  pauses: Array<[number, number | null]>;
  /** The retention horizon (ms): a trigger records an occurrence before it missed, never runs it. */
  prunedBefore: number;
  /** Closings so far (Occ.closedSeq). */
  closings: number;
  occ: Map<string, Occ>;
}

export const HOUR = 3_600_000;
/** The job's two schedules: a schedule change moves it from one to the other. */
export const SCHEDULES = ['0 * * * *', '30 * * * *'] as const;
/** Grace after a tick before it counts as due (run --alert-after). */
export const ALERT_AFTER_MS = 1_000;

export function newJob(maxAttempts: number, registeredAt: number): JobModel {
  return {
    maxAttempts,
    schedule: SCHEDULES[0],
    scheduleFrom: Number.NEGATIVE_INFINITY,
    registeredAt,
    paused: false,
    pauses: [],
    prunedBefore: Number.NEGATIVE_INFINITY,
    closings: 0,
    occ: new Map(),
  };
}

export function cloneJob(j: JobModel): JobModel {
  return {
    ...j,
    pauses: j.pauses.map(([a, b]) => [a, b]),
    occ: new Map([...j.occ].map(([k, o]) => [k, { ...o }])),
  };
}

/** The window key of an occurrence (run --window-from-schedule, no --window-format). */
export const windowKey = (ms: number): string => new Date(ms).toISOString().replace('.000Z', 'Z');
export const tickOf = (key: string): number => Date.parse(key);
const minuteOf = (schedule: string): number => (schedule === SCHEDULES[1] ? 30 : 0);

export function occOf(j: JobModel, key: string): Occ {
  let o = j.occ.get(key);
  if (!o) j.occ.set(key, (o = { attempts: 0, failed: 0, status: 'none' }));
  return o;
}

export const closed = (o: Occ): boolean =>
  o.status === 'completed' ||
  o.status === 'marked-done' ||
  o.status === 'marked-skipped' ||
  o.status === 'paused-skipped';

/** The occurrence closed now (completed, marked, skipped by a pause). */
export function close(j: JobModel, o: Occ, status: OccStatus): void {
  o.status = status;
  o.closedSeq = ++j.closings;
}

/**
 * `prune`: the horizon rises to `horizon`; rows before it that are final or missed are deleted,
 * but the job's latest closing.
 */
export function prune(j: JobModel, horizon: number): void {
  j.prunedBefore = Math.max(j.prunedBefore, horizon);
  const latest = Math.max(0, ...[...j.occ.values()].map((o) => o.closedSeq ?? 0));
  for (const [k, o] of j.occ)
    if (tickOf(k) < horizon && (closed(o) || o.status === 'missed') && (o.closedSeq ?? 0) !== latest) j.occ.delete(k);
}

/** A trigger skipped by a pause records the occurrence as skipped (final) when it had no row yet. */
function pausedSkip(j: JobModel, key: string): void {
  const o = occOf(j, key);
  if (o.attempts === 0 && o.status === 'none') close(j, o, 'paused-skipped');
}

/** How a trigger asks: with --retry-delay (backoff) and with --retries r (its default budget r + 1). */
export interface Ask {
  backoff: boolean;
  retries: number;
}

/**
 * Whether the occurrence's budget is spent for this trigger: --max-attempts counts every attempt
 * that did not complete; run's default budget (no --max-attempts, and not --retry-delay without
 * --retries) counts the failed ones only, r + 1 of them for --retries r: a lost or replaced
 * attempt does not spend it (docs/occurrence.md).
 */
export function spent(j: JobModel, o: Occ, ask: Ask): boolean {
  if (j.maxAttempts > 0) return o.attempts >= j.maxAttempts;
  if (ask.backoff && ask.retries === 0) return false;
  return o.failed >= ask.retries + 1;
}

export type Decision =
  { start: true } | { start: false; why: 'paused' | 'pruned' | 'closed' | 'exhausted' | 'backoff' };

/**
 * What a trigger (run without --rerun) may do with an occurrence. `backoff`: the trigger gives
 * --retry-delay, long enough that a failure before it is always within its backoff.
 */
export function decide(j: JobModel, key: string, backoff: boolean, retries = 0): Decision {
  // The retention horizon first: a trigger while paused still records a pruned occurrence missed.
  if (tickOf(key) < j.prunedBefore) return { start: false, why: 'pruned' };
  if (j.paused) return { start: false, why: 'paused' };
  const o = j.occ.get(key) ?? { attempts: 0, failed: 0, status: 'none' };
  if (closed(o)) return { start: false, why: 'closed' };
  if (spent(j, o, { backoff, retries })) return { start: false, why: 'exhausted' };
  // The backoff follows a failed finish only: never a lost, crashed or replaced attempt.
  if (backoff && o.status === 'failed') return { start: false, why: 'backoff' };
  return { start: true };
}

/**
 * A trigger's whole run: the tries it starts (each an attempt) and its exit code. `fails`: the
 * child exits 3; `retries`: tries again inside the run while the budget allows.
 */
export function trigger(
  j: JobModel,
  key: string,
  opts: { fails: boolean; retries: number; backoff: boolean },
): { starts: number; exit: number; why?: string } {
  const d = decide(j, key, opts.backoff, opts.retries);
  if (!d.start && d.why === 'paused') pausedSkip(j, key);
  if (!d.start && d.why === 'pruned') {
    const o = occOf(j, key);
    if (o.attempts === 0 && o.status === 'none') o.status = 'missed';
  }
  if (!d.start) return { starts: 0, exit: 0, why: d.why };
  const o = occOf(j, key);
  let starts = 0;
  for (let tries = 0; ; tries++) {
    o.attempts++;
    starts++;
    if (opts.fails) fail(o);
    else close(j, o, 'completed');
    if (!opts.fails || tries >= opts.retries || spent(j, o, opts)) break;
  }
  return { starts, exit: opts.fails ? 3 : 0 };
}

function fail(o: Occ): void {
  o.status = 'failed';
  o.failed++;
}

/** `run --rerun`: runs whatever the budget, a completion or the retention horizon say, unless paused. */
export function rerun(j: JobModel, key: string, fails: boolean): { starts: number; exit: number } {
  if (j.paused) {
    pausedSkip(j, key);
    return { starts: 0, exit: 0 };
  }
  const o = occOf(j, key);
  o.attempts++;
  if (fails) fail(o);
  else close(j, o, 'completed');
  return { starts: 1, exit: fails ? 3 : 0 };
}

/** The newest ticks of the current schedule at or before `at`, newest first (the lookback: 24). */
export function ticksBefore(j: JobModel, at: number, n = 24): number[] {
  const m = minuteOf(j.schedule) * 60_000;
  let t = Math.floor((at - m) / HOUR) * HOUR + m;
  const out: number[] = [];
  for (; out.length < n && t > at - 24 * HOUR - 1; t -= HOUR) out.push(t);
  return out;
}

/**
 * The occurrences due and not completed at `now`: ticks of the current schedule within the
 * lookback and past their grace, not closed, not in a pause (none while paused). A tick with a
 * row (a run claimed it, or recorded it missed) is judged whenever it was scheduled; one without
 * only from the job's registration, the schedule's taking effect and the retention horizon on.
 */
export function dueNotCompleted(j: JobModel, now: number): string[] {
  if (j.paused) return [];
  const out: string[] = [];
  for (const t of ticksBefore(j, now - ALERT_AFTER_MS)) {
    if (j.pauses.some(([a, b]) => t >= a && (b === null || t < b))) continue;
    const key = windowKey(t);
    const o = j.occ.get(key);
    if (o && closed(o)) continue;
    const row = o !== undefined && (o.attempts > 0 || o.status === 'missed');
    if (row || (t >= j.registeredAt && t >= j.scheduleFrom && t >= j.prunedBefore)) out.push(key);
  }
  return out.sort();
}

/**
 * Occurrences `check` must call exhausted: attempts spent, not closed. Only a --max-attempts
 * budget is reported: a failure spending the default budget is reported as failed.
 */
export function exhausted(j: JobModel): string[] {
  return [...j.occ]
    .filter(([, o]) => !closed(o) && j.maxAttempts > 0 && o.attempts >= j.maxAttempts)
    .map(([k]) => k)
    .sort();
}

/** The coarse state `history --by-occurrence` must agree with. */
export type StateClass = 'closed' | 'exhausted' | 'open' | 'none';
export function stateClass(j: JobModel, o: Occ): StateClass {
  if (closed(o)) return 'closed';
  if (j.maxAttempts > 0 && o.attempts >= j.maxAttempts) return 'exhausted';
  return o.attempts > 0 ? 'open' : 'none';
}
