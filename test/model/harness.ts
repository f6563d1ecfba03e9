// The model-based test's real side and its commands: each command runs one operation or fault
// through the built CLI against one store (a trigger, a crash then release or expiry, replace,
// mark, --rerun, pause, resume, prune, a schedule change, a state-file backup and restore), applies
// it to the reference model, and then compares every occurrence with the model.
import { appendFileSync, copyFileSync, existsSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { fixture, runCli, startCli, startExporter, waitFor } from '../helpers/cli.js';
import { NO_DB_ENV } from '../helpers/both-stores.js';
import { NOT_COMPLETED_LISTED } from '../../src/store/contract.js';
import {
  ALERT_AFTER_MS,
  HOUR,
  SCHEDULES,
  close,
  closed,
  cloneJob,
  decide,
  dueNotCompleted,
  exhausted,
  newJob,
  occOf,
  prune,
  rerun,
  stateClass,
  tickOf,
  ticksBefore,
  trigger,
  windowKey,
  type JobModel,
} from './occurrence-model.js';
import { readPidFile, signalPid } from '../helpers/signal.mjs';

export type StoreKind = 'postgres' | 'sqlite';

/** The model side: the job as the store should hold it, and the child starts that happened. */
export interface Model {
  job: JobModel;
  /** Child starts per occurrence, as the fixture records them: a restore never takes one back. */
  starts: Map<string, number>;
  backup?: JobModel;
}

/** The real side: one job in one store, its starts file, the steps run so far. */
export interface Real {
  store: StoreKind;
  conn: string[];
  job: string;
  dir: string;
  startsFile: string;
  stateFile?: string;
  /** The top of the hour the sequence's occurrences count back from (fixed at its start). */
  base: number;
  /** The highest fencing token of the starts compared so far, and how many starts that was. */
  tokenFloor: bigint;
  linesSeen: number;
  steps: string[];
}

const env = NO_DB_ENV;
let serial = 0;

/** The ticks a sequence picks from: k hours before its base, on the job's current schedule. */
export const OCCURRENCES = 5;
const keyFor = (m: Model, r: Real, k: number): string =>
  windowKey(r.base - k * HOUR + (m.job.schedule === SCHEDULES[1] ? 30 * 60_000 : 0));

export interface Store {
  kind: StoreKind;
  /** The flags for a fresh place to keep this sequence's job (a state file of its own, or the test schema). */
  conn: (dir: string) => string[];
  /** Move the job's registration `ms` back (the registry's created_at), as if it had run for long. */
  backdate: (conn: string[], job: string, ms: number) => Promise<void>;
}

/** How far back a sequence's job counts as registered: its ticks no run claimed are due since. */
export const REGISTERED_BACK = 12 * HOUR;

/** A fresh job with its first occurrence (6 hours back) completed: registered now, before any step. */
export async function setup(store: Store, maxAttempts: number): Promise<{ model: Model; real: Real }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-model-'));
  const job = `m${process.pid}-${++serial}`;
  const base = Math.floor(Date.now() / HOUR) * HOUR;
  const real: Real = {
    store: store.kind,
    conn: store.conn(dir),
    job,
    dir,
    startsFile: path.join(dir, 'starts.jsonl'),
    base,
    tokenFloor: -1n,
    linesSeen: 0,
    steps: [],
  };
  if (store.kind === 'sqlite') real.stateFile = real.conn[1];
  const registeredAt = Date.now() - REGISTERED_BACK;
  const model: Model = { job: newJob(maxAttempts, registeredAt), starts: new Map() };
  const key = windowKey(base - 6 * HOUR);
  const r = await runCli(runArgs(model, real, key, []), env);
  if (r.exitCode !== 0) throw new Error(`setup run: exit ${r.exitCode}\n${r.all}`);
  // Registered 12 hours back: the ticks since that no run claimed are due (and a schedule
  // change has earlier ticks of its new schedule to judge).
  await store.backdate(real.conn, job, REGISTERED_BACK);
  trigger(model.job, key, { fails: false, retries: 0, backoff: false });
  model.starts.set(key, 1);
  real.tokenFloor = BigInt(startLines(real)[0]!.FENCE_TOKEN);
  real.linesSeen = 1;
  return { model, real };
}

export function cleanup(real: Real): void {
  rmSync(real.dir, { recursive: true, force: true });
}

function runArgs(m: Model, r: Real, key: string, extra: string[], mode?: string): string[] {
  return [
    'run',
    ...r.conn,
    '--name',
    r.job,
    '--schedule',
    m.job.schedule,
    '--window-from-schedule',
    '--alert-after',
    `${ALERT_AFTER_MS}ms`,
    // 0: no --max-attempts, run's default budget (failed attempts only).
    ...(m.job.maxAttempts > 0 ? ['--max-attempts', String(m.job.maxAttempts)] : []),
    '--scheduled-time',
    key,
    ...extra,
    '--',
    process.execPath,
    fixture('append-env.mjs'),
    r.startsFile,
    ...(mode ? [mode] : []),
  ];
}

function step(r: Real, name: string): void {
  r.steps.push(name);
  logStep(r, name);
}

/** LEASEJOB_MODEL_LOG=<file>: each step appended as it starts (a long run's progress, a hang's place). */
function logStep(r: Real, step: string): void {
  const file = process.env.LEASEJOB_MODEL_LOG;
  if (file) appendFileSync(file, `${new Date().toISOString()} ${r.store} ${r.job} ${step}\n`);
}

const fail = (r: Real, what: string): never => {
  throw new Error(`${r.store}: ${what}\n  steps: ${r.steps.join(' -> ')}`);
};

interface StartLine {
  LEASEJOB_WINDOW: string;
  FENCE_TOKEN: string;
}
function startLines(r: Real): StartLine[] {
  if (!existsSync(r.startsFile)) return [];
  return readFileSync(r.startsFile, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as StartLine);
}

const count = (m: Map<string, number>, k: string, n = 1): void => {
  m.set(k, (m.get(k) ?? 0) + n);
};

/** After every step: the model's and the store's view of every occurrence, the starts, check's judgement. */
export async function compare(m: Model, r: Real): Promise<void> {
  // Starts as the child recorded them: exactly the model's, with tokens that never go back.
  const lines = startLines(r);
  const seen = new Map<string, number>();
  for (const l of lines) count(seen, l.LEASEJOB_WINDOW);
  // A step's starts come after every earlier step's in token order; within one run the tries of
  // --retries share its lease, and so its token.
  let last = r.tokenFloor;
  for (const l of lines.slice(r.linesSeen)) {
    const t = BigInt(l.FENCE_TOKEN);
    if (t <= r.tokenFloor || t < last)
      fail(
        r,
        `fencing token went back: ${t} after ${last > r.tokenFloor ? last : r.tokenFloor} (window ${l.LEASEJOB_WINDOW})`,
      );
    last = t;
  }
  r.tokenFloor = last;
  r.linesSeen = lines.length;
  for (const k of new Set([...seen.keys(), ...m.starts.keys()])) {
    const real = seen.get(k) ?? 0;
    const want = m.starts.get(k) ?? 0;
    if (real !== want) fail(r, `occurrence ${k}: ${real} child starts, the model says ${want}`);
  }

  // Each occurrence's state as `history --by-occurrence` gives it.
  const h = await runCli(['history', ...r.conn, '--name', r.job, '--by-occurrence', '--json', '--limit', '1000'], env);
  if (h.exitCode !== 0) fail(r, `history: exit ${h.exitCode}\n${h.all}`);
  const rows = JSON.parse(h.stdout) as Array<{ window: string; reason: string; attempts: number }>;
  const byWindow = new Map(rows.map((x) => [x.window, x]));
  for (const [k, o] of m.job.occ) {
    if (tickOf(k) < m.job.prunedBefore) continue; // pruned: its rows may be gone
    const x = byWindow.get(k);
    const want = stateClass(m.job, o);
    const got = realClass(x);
    const crashedSpent = o.status === 'crashed' && want === 'exhausted' && got === 'open';
    if (got !== want && !crashedSpent)
      fail(r, `occurrence ${k}: store says ${got} (${x?.reason ?? 'no row'}), the model ${want} (${o.status})`);
    if ((x?.attempts ?? 0) !== o.attempts)
      fail(r, `occurrence ${k}: store counts ${x?.attempts ?? 0} attempts, the model ${o.attempts}`);
  }

  // What check calls due and not completed, and exhausted.
  const c = await runCli(['check', ...r.conn, '--name', r.job, '--json'], env);
  const out = JSON.parse(c.stdout) as {
    dbNow: string;
    problems: Array<{ kind: string; message: string; count?: number; occurrences?: Array<{ window: string }> }>;
  };
  const listed = out.problems.filter((p) => p.kind === 'not-completed' || p.kind === 'overdue');
  const due = listed.flatMap((p) => (p.occurrences ?? []).map((o) => o.window)).sort();
  const total = listed.reduce((n, p) => n + (p.count ?? 0), 0);
  const now = Date.parse(out.dbNow);
  if (!nearModel(m.job, now, due, total))
    fail(r, `check: due and not completed ${fmt(due)} (${total}), the model ${fmt(dueNotCompleted(m.job, now))}`);
  // Before the retention horizon a trigger may have recorded a spent occurrence missed: not judged.
  const spent = out.problems
    .filter((p) => p.kind === 'exhausted')
    .map((p) => /window (\S+)/.exec(p.message)![1]!)
    .filter((k) => tickOf(k) >= m.job.prunedBefore)
    .sort();
  const wantSpent = exhausted(m.job).filter((k) => tickOf(k) >= m.job.prunedBefore);
  if (fmt(spent) !== fmt(wantSpent)) fail(r, `check: exhausted ${fmt(spent)}, the model ${fmt(wantSpent)}`);
}

/**
 * The model's due set at `now` as check lists it (the oldest NOT_COMPLETED_LISTED and the latest
 * due tick; `total` counts them all), allowing for a tick passing within the read.
 */
function nearModel(j: JobModel, now: number, got: string[], total: number): boolean {
  return [0, -3_000, 3_000].some((d) => {
    const all = dueNotCompleted(j, now + d);
    const latest = windowKey(ticksBefore(j, now + d - ALERT_AFTER_MS, 1)[0]!);
    const shown = new Set([...all.slice(0, NOT_COMPLETED_LISTED), ...all.filter((k) => k === latest)]);
    return fmt([...shown].sort()) === fmt(got) && all.length === total;
  });
}
const fmt = (l: string[]): string => `[${l.join(', ')}]`;

function realClass(x: { reason: string; attempts: number } | undefined): string {
  if (!x) return 'none';
  if (['completed', 'caught-up', 'backfilled', 'skipped-marked', 'skipped-paused'].includes(x.reason)) return 'closed';
  if (x.reason === 'exhausted') return 'exhausted';
  return x.attempts > 0 ? 'open' : 'none';
}

/** At the end of a sequence: the exporter's count of due occurrences not completed is the model's. */
export async function compareExporter(m: Model, r: Real): Promise<void> {
  const ex = await startExporter(r.conn, env, { timeoutMs: 120_000 });
  try {
    const text = await (await fetch(`http://127.0.0.1:${ex.port}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith(`leasejob_due_occurrences_not_completed{job="${r.job}"}`));
    const got = line === undefined ? 0 : Number(line.split(' ').at(-1));
    const now = Date.now();
    const ok = [0, -3_000, 3_000].some((d) => dueNotCompleted(m.job, now + d).length === got);
    if (!ok) fail(r, `exporter: ${got} due not completed, the model ${fmt(dueNotCompleted(m.job, now))}`);
  } finally {
    await ex.stop();
  }
}

type Cmd = fc.AsyncCommand<Model, Real>;

/** A trigger: `run` of occurrence k, its child ok or failing, with a backoff or in-run retries or neither. */
class Trigger implements Cmd {
  constructor(
    readonly k: number,
    readonly fails: boolean,
    readonly retry: 'none' | 'backoff' | 'retries',
  ) {}
  check = (): boolean => true;
  async run(m: Model, r: Real): Promise<void> {
    step(r, this.toString());
    const key = keyFor(m, r, this.k);
    const extra =
      this.retry === 'backoff'
        ? ['--retry-delay', '1h']
        : this.retry === 'retries'
          ? ['--retries', '1', '--retry-delay', '1ms']
          : [];
    const wasClosed = closed(occOf(m.job, key));
    const res = await runCli(runArgs(m, r, key, extra, this.fails ? `fail=3=${key}` : undefined), env);
    const want = trigger(m.job, key, {
      fails: this.fails,
      retries: this.retry === 'retries' ? 1 : 0,
      backoff: this.retry === 'backoff',
    });
    count(m.starts, key, want.starts);
    if (wasClosed && startLines(r).filter((l) => l.LEASEJOB_WINDOW === key).length > (m.starts.get(key) ?? 0))
      fail(r, `a completed occurrence ${key} started again`);
    if (res.exitCode !== want.exit)
      fail(r, `run ${key}: exit ${res.exitCode}, the model ${want.exit} (${want.why ?? 'starts'})\n${res.all}`);
    await compare(m, r);
  }
  toString = (): string =>
    `run(k=${this.k}${this.fails ? ',fails' : ''}${this.retry === 'none' ? '' : ',' + this.retry})`;
}

/** `run --rerun` of a completed occurrence. */
class Rerun implements Cmd {
  constructor(
    readonly k: number,
    readonly fails: boolean,
  ) {}
  check = (): boolean => true;
  async run(m: Model, r: Real): Promise<void> {
    const key = keyFor(m, r, this.k);
    // A rerun of a completed occurrence only, not pruned (its row, and so its count, may be gone).
    if (occOf(m.job, key).status !== 'completed' || tickOf(key) < m.job.prunedBefore) return;
    step(r, this.toString());
    const res = await runCli(runArgs(m, r, key, ['--rerun'], this.fails ? `fail=3=${key}` : undefined), env);
    const want = rerun(m.job, key, this.fails);
    count(m.starts, key, want.starts);
    if (res.exitCode !== want.exit) fail(r, `rerun ${key}: exit ${res.exitCode}, the model ${want.exit}\n${res.all}`);
    await compare(m, r);
  }
  toString = (): string => `rerun(k=${this.k}${this.fails ? ',fails' : ''})`;
}

/** Start a run of occurrence k whose child blocks; resolves once the child is running. */
async function startBlocked(m: Model, r: Real, key: string, extra: string[]) {
  const blocked = `${r.startsFile}.blocked`;
  rmSync(blocked, { force: true });
  const p = startCli(runArgs(m, r, key, extra, `block=${key}`), env, { timeoutMs: 180_000 });
  let ended = false;
  void p.then(() => (ended = true));
  await waitFor('the blocked child to start', () => existsSync(blocked) || ended, 60_000);
  if (!existsSync(blocked)) fail(r, `run ${key} did not start its child: exit ${(await p).exitCode}\n${(await p).all}`);
  const childPid = readPidFile(blocked);
  if (childPid === undefined) fail(r, `run ${key} wrote no whole pid to ${blocked}`);
  return { p, childPid };
}

/**
 * A crash: the holder of occurrence k and its child SIGKILLed mid-run; then either an operator's
 * `release --force` (a long TTL) or the lease's expiry waited out on the database clock (TTL 3 s).
 */
class Crash implements Cmd {
  constructor(
    readonly k: number,
    readonly then: 'release' | 'expire',
  ) {}
  check = (m: Readonly<Model>): boolean => !m.job.paused;
  async run(m: Model, r: Real): Promise<void> {
    const key = keyFor(m, r, this.k);
    if (!decide(m.job, key, false).start) return; // only a run that starts its child can crash
    step(r, this.toString());
    const { p, childPid } = await startBlocked(m, r, key, this.then === 'expire' ? ['--ttl', '3s'] : []);
    p.kill('SIGKILL');
    try {
      signalPid(childPid, 'SIGKILL');
    } catch {
      // already gone with its holder
    }
    await p;
    const o = occOf(m.job, key);
    o.attempts++;
    count(m.starts, key);
    if (this.then === 'release') {
      const rel = await runCli(['release', ...r.conn, '--name', r.job, '--force'], env);
      if (rel.exitCode !== 0) fail(r, `release: exit ${rel.exitCode}\n${rel.all}`);
      o.status = 'lost';
    } else {
      o.status = 'crashed';
      await waitFor(
        'the crashed lease to expire on the database clock',
        async () => {
          const s = await runCli(['status', ...r.conn, '--name', r.job, '--json'], env);
          return (JSON.parse(s.stdout) as { jobs: Array<{ held: boolean }> }).jobs[0]?.held === false;
        },
        60_000,
        200,
      );
    }
    await compare(m, r);
  }
  toString = (): string => `crash(k=${this.k},${this.then})`;
}

/** Occurrence k1 running, then a run of a later occurrence k2 < k1 (hours back) with --on-busy replace. */
class Replace implements Cmd {
  constructor(
    readonly k1: number,
    readonly k2: number,
    readonly fails: boolean,
  ) {}
  check = (m: Readonly<Model>): boolean => !m.job.paused && this.k2 < this.k1;
  async run(m: Model, r: Real): Promise<void> {
    const [t1, t2] = [keyFor(m, r, this.k1), keyFor(m, r, this.k2)];
    if (!decide(m.job, t1, false).start || !decide(m.job, t2, false).start) return;
    step(r, this.toString());
    // TTL 15 s: the holder keeps its lease and hears the replace at its next renewal (TTL/3).
    const a = await startBlocked(m, r, t1, ['--ttl', '15s']);
    const res = await runCli(runArgs(m, r, t2, ['--on-busy', 'replace'], this.fails ? `fail=3=${t2}` : undefined), env);
    await a.p;
    const o = occOf(m.job, t1);
    o.attempts++;
    o.status = 'replaced';
    count(m.starts, t1);
    const want = trigger(m.job, t2, { fails: this.fails, retries: 0, backoff: false });
    count(m.starts, t2, want.starts);
    if (res.exitCode !== want.exit) fail(r, `replace ${t2}: exit ${res.exitCode}, the model ${want.exit}\n${res.all}`);
    await compare(m, r);
  }
  toString = (): string => `replace(k=${this.k1} by k=${this.k2}${this.fails ? ',fails' : ''})`;
}

class Mark implements Cmd {
  constructor(
    readonly k: number,
    readonly how: 'done' | 'skipped',
  ) {}
  check = (): boolean => true;
  async run(m: Model, r: Real): Promise<void> {
    const key = keyFor(m, r, this.k);
    const o = occOf(m.job, key);
    if (closed(o) || tickOf(key) < m.job.prunedBefore) return;
    step(r, this.toString());
    const res = await runCli(['mark', ...r.conn, '--name', r.job, '--window', key, `--${this.how}`], env);
    if (res.exitCode !== 0) fail(r, `mark ${key}: exit ${res.exitCode}\n${res.all}`);
    close(m.job, o, this.how === 'done' ? 'marked-done' : 'marked-skipped');
    await compare(m, r);
  }
  toString = (): string => `mark(k=${this.k},${this.how})`;
}

class Pause implements Cmd {
  constructor(readonly on: boolean) {}
  check = (m: Readonly<Model>): boolean => m.job.paused !== this.on;
  async run(m: Model, r: Real): Promise<void> {
    step(r, this.toString());
    const at = Date.now();
    const res = await runCli([this.on ? 'pause' : 'resume', ...r.conn, '--name', r.job], env);
    if (res.exitCode !== 0) fail(r, `${this}: exit ${res.exitCode}\n${res.all}`);
    m.job.paused = this.on;
    if (this.on) m.job.pauses.push([at, null]);
    else m.job.pauses.at(-1)![1] = at;
    await compare(m, r);
  }
  toString = (): string => (this.on ? 'pause' : 'resume');
}

/** `prune --older-than 3h`: occurrences scheduled before the horizon never run and are never due. */
class Prune implements Cmd {
  check = (): boolean => true;
  async run(m: Model, r: Real): Promise<void> {
    step(r, this.toString());
    const at = Date.now();
    const res = await runCli(['prune', ...r.conn, '--name', r.job, '--older-than', '3h'], env);
    if (res.exitCode !== 0) fail(r, `prune: exit ${res.exitCode}\n${res.all}`);
    prune(m.job, at - 3 * HOUR);
    await compare(m, r);
  }
  toString = (): string => 'prune(3h)';
}

/** A run under the other schedule: the registry adopts it; its earlier occurrences are never due. */
class ScheduleChange implements Cmd {
  constructor(readonly k: number) {}
  check = (): boolean => true;
  async run(m: Model, r: Real): Promise<void> {
    step(r, this.toString());
    const at = Date.now();
    m.job.schedule = m.job.schedule === SCHEDULES[0] ? SCHEDULES[1] : SCHEDULES[0];
    m.job.scheduleFrom = at;
    const key = keyFor(m, r, this.k);
    const res = await runCli(runArgs(m, r, key, []), env);
    const want = trigger(m.job, key, { fails: false, retries: 0, backoff: false });
    count(m.starts, key, want.starts);
    if (res.exitCode !== want.exit) fail(r, `run ${key} (new schedule): exit ${res.exitCode}\n${res.all}`);
    await compare(m, r);
  }
  toString = (): string => `schedule-change(k=${this.k})`;
}

const stateFiles = (f: string): string[] => [f, `${f}-wal`, `${f}-shm`];

/** Embedded store: the state file copied aside (a host backup) between two runs. */
class Backup implements Cmd {
  check = (): boolean => true;
  async run(m: Model, r: Real): Promise<void> {
    step(r, this.toString());
    for (const f of stateFiles(r.stateFile!)) {
      rmSync(`${f}.bak`, { force: true });
      if (existsSync(f)) copyFileSync(f, `${f}.bak`);
    }
    m.backup = cloneJob(m.job);
  }
  toString = (): string => 'backup';
}

/**
 * Embedded store: the backup copied back in place. The store is the backup's; tokens still never
 * go back. `rename`: written beside and renamed over, as a host restore or a copied volume gives
 * a new file; `in-place`: copied over the live file's own bytes (`cp backup.db state.db`: same
 * inode, same boot), which nothing in the file tells from the original (issue 44).
 */
class Restore implements Cmd {
  constructor(readonly how: 'rename' | 'in-place' = 'rename') {}
  check = (m: Readonly<Model>): boolean => m.backup !== undefined;
  async run(m: Model, r: Real): Promise<void> {
    step(r, this.toString());
    for (const f of stateFiles(r.stateFile!)) {
      if (!existsSync(`${f}.bak`)) rmSync(f, { force: true });
      else if (this.how === 'in-place') copyFileSync(`${f}.bak`, f);
      else {
        copyFileSync(`${f}.bak`, `${f}.new`);
        renameSync(`${f}.new`, f);
      }
    }
    m.job = cloneJob(m.backup!);
    await compare(m, r);
  }
  toString = (): string => (this.how === 'in-place' ? 'restore(in-place)' : 'restore');
}

/** The step kinds, by the name `--only` takes (the first word of each step as printed). */
export const STEP_KINDS = [
  'run',
  'rerun',
  'crash',
  'crash-release',
  'crash-expire',
  'replace',
  'mark',
  'pause',
  'prune',
  'schedule-change',
  'backup',
  'restore',
] as const;

/**
 * How a crash ends: either, or the one `only` names. The list of arbitraries and each one's
 * shape stay as they were for a run of every kind: a kept seed and path replay only on them.
 */
function crashVariant(only?: readonly string[]): fc.Arbitrary<Crash['then']> {
  const release = only?.includes('crash-release') ?? false;
  const expire = only?.includes('crash-expire') ?? false;
  if (release !== expire && !only?.includes('crash')) return fc.constant(release ? 'release' : 'expire');
  return fc.constantFrom('release', 'expire');
}

/**
 * The commands fast-check draws sequences from (a backup and restore only for the embedded
 * store); `only` narrows them to some kinds, to aim a long run at one part of the table.
 */
export function commandArbs(store: StoreKind, only?: readonly string[]): Array<fc.Arbitrary<Cmd>> {
  const k = fc.integer({ min: 1, max: OCCURRENCES });
  const arbs: Array<[string, fc.Arbitrary<Cmd>, ...string[]]> = [
    [
      'run',
      fc
        .tuple(k, fc.boolean(), fc.constantFrom('none', 'backoff', 'retries') as fc.Arbitrary<Trigger['retry']>)
        .map(([a, b, c]) => new Trigger(a, b, c)),
    ],
    ['run', fc.tuple(k, fc.boolean()).map(([a, b]) => new Trigger(a, b, 'none'))],
    ['rerun', fc.tuple(k, fc.boolean()).map(([a, b]) => new Rerun(a, b))],
    ['crash', fc.tuple(k, crashVariant(only)).map(([a, b]) => new Crash(a, b)), 'crash-release', 'crash-expire'],
    ['replace', fc.tuple(k, k, fc.boolean()).map(([a, b, c]) => new Replace(Math.max(a, b), Math.min(a, b), c))],
    [
      'mark',
      fc.tuple(k, fc.constantFrom('done', 'skipped') as fc.Arbitrary<Mark['how']>).map(([a, b]) => new Mark(a, b)),
    ],
    ['pause', fc.boolean().map((on) => new Pause(on))],
    ['prune', fc.constant(new Prune())],
    ['schedule-change', k.map((a) => new ScheduleChange(a))],
  ];
  if (store === 'sqlite')
    arbs.push(
      ['backup', fc.constant(new Backup())],
      ['restore', fc.constantFrom('rename', 'in-place').map((how) => new Restore(how as Restore['how']))],
    );
  return arbs
    .filter(([kind, , ...variants]) => !only || only.includes(kind) || variants.some((v) => only.includes(v)))
    .map(([, a]) => a);
}

/** A step as printed (`run(k=2,fails,backoff)`, `replace(k=3 by k=1)`, `pause`...) back into its command. */
export function parseStep(text: string): Cmd {
  const m = /^([a-z-]+)(?:\((.*)\))?$/.exec(text.trim());
  if (!m) throw new Error(`not a step: ${text}`);
  const [, name, inner = ''] = m;
  const parts = inner.split(',').map((x) => x.trim());
  const k = (x: string | undefined): number => Number(/k=(\d+)/.exec(x ?? '')?.[1]);
  const has = (flag: string): boolean => parts.includes(flag);
  switch (name) {
    case 'run':
      return new Trigger(k(parts[0]), has('fails'), has('backoff') ? 'backoff' : has('retries') ? 'retries' : 'none');
    case 'rerun':
      return new Rerun(k(parts[0]), has('fails'));
    case 'crash':
      return new Crash(k(parts[0]), has('release') ? 'release' : 'expire');
    case 'replace': {
      const [a, b] = parts[0]!.split(' by ');
      return new Replace(k(a), k(b), has('fails'));
    }
    case 'mark':
      return new Mark(k(parts[0]), has('done') ? 'done' : 'skipped');
    case 'pause':
    case 'resume':
      return new Pause(name === 'pause');
    case 'prune':
      return new Prune();
    case 'schedule-change':
      return new ScheduleChange(k(parts[0]));
    case 'backup':
      return new Backup();
    case 'restore':
      return new Restore(has('in-place') ? 'in-place' : 'rename');
  }
  throw new Error(`not a step: ${text}`);
}

/** One sequence, as a regression case keeps it: a fresh job with this budget, these steps, the exporter at the end. */
export async function runSequence(store: Store, maxAttempts: number, steps: string[]): Promise<void> {
  const cmds = steps.map(parseStep);
  const s = await setup(store, maxAttempts);
  try {
    await fc.asyncModelRun(() => s, cmds);
    await compareExporter(s.model, s.real);
  } finally {
    cleanup(s.real);
  }
}

/** fast-check's budget for one property: runs, sequence length, and a given seed and path to replay. */
export interface ModelRunOptions {
  runs: number;
  maxCommands: number;
  seed?: number;
  path?: string;
  /** fc.commands' own replay path, printed with a counterexample (`replayPath="..."`). */
  replayPath?: string;
  /** Only these step kinds (STEP_KINDS); all when not given. */
  only?: readonly string[];
}

export interface ModelRunStats {
  sequences: number;
  steps: number;
  longest: number;
}

/** Random sequences against one store, each compared with the model step by step and by the exporter at its end. */
export async function runModel(
  store: Store,
  o: ModelRunOptions,
  stats: ModelRunStats = { sequences: 0, steps: 0, longest: 0 },
): Promise<ModelRunStats> {
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 0, max: 3 }),
      fc.commands(commandArbs(store.kind, o.only), {
        maxCommands: o.maxCommands,
        ...(o.replayPath !== undefined ? { replayPath: o.replayPath } : {}),
      }),
      async (maxAttempts, cmds) => {
        const s = await setup(store, maxAttempts);
        try {
          await fc.asyncModelRun(() => s, cmds);
          await compareExporter(s.model, s.real);
        } finally {
          stats.sequences++;
          stats.steps += s.real.steps.length;
          stats.longest = Math.max(stats.longest, s.real.steps.length);
          cleanup(s.real);
        }
      },
    ),
    {
      numRuns: o.runs,
      ...(o.seed !== undefined ? { seed: o.seed } : {}),
      // A replay reports its counterexample as found: shrinking it again takes minutes of CLI runs.
      ...(o.path !== undefined ? { path: o.path, endOnFailure: true } : {}),
      verbose: 1,
    },
  );
  return stats;
}
