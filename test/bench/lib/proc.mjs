// Process helpers for the bench: run and time a process, watch /proc, wait for things.
import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { rotate } from './stats.mjs';

// stopProcess(child, graceMs): SIGTERM, then SIGKILL after graceMs (shared with the test helpers).
export { isAlive, stopProcess } from '../../helpers/proc.mjs';

// The checkout whose bin/ and dist/ are measured: this one, or LEASEJOB_BENCH_ROOT (another
// checkout or a snapshot of this one, e.g. to bench a build while src/ is being edited).
export const ROOT = path.resolve(
  process.env.LEASEJOB_BENCH_ROOT ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..'),
);
export const BIN = path.join(ROOT, 'bin', 'leasejob.js');
/** test/bench/ of this checkout (fixtures live here whatever ROOT is). */
export const BENCH_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
/** The floor of a leased run (fixtures/floor.cjs; see the bench README). */
export const FLOOR = path.join(BENCH_DIR, 'fixtures', 'floor.cjs');
export const NODE = process.execPath;

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Start a process; `done` resolves with wall time from just before spawn to the 'exit' event,
 * the exit code/signal, and the captured stdout/stderr (when piped). The handle's stderr()
 * returns what has been captured so far, while it runs.
 * @param {string} file @param {string[]} args
 * `stdoutFile`: stdout goes to that file (a regular file: writes never block or get cut).
 * @param {{ env?: NodeJS.ProcessEnv, stdout?: boolean, stdoutFile?: string }} [opts]
 */
export function start(file, args, opts = {}) {
  const outFd = opts.stdoutFile ? openSync(opts.stdoutFile, 'w') : undefined;
  const t0 = performance.now();
  const wall0 = Date.now();
  const child = spawn(file, args, {
    env: opts.env ?? process.env,
    cwd: ROOT,
    stdio: ['ignore', outFd ?? (opts.stdout ? 'pipe' : 'ignore'), 'pipe'],
  });
  if (outFd !== undefined) closeSync(outFd);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d) => (stdout += d));
  child.stderr?.on('data', (d) => (stderr += d));
  const done = new Promise((resolve) => {
    child.on('error', (err) =>
      resolve({
        ms: performance.now() - t0,
        code: -1,
        signal: null,
        stdout,
        stderr: String(err),
        wallStart: wall0,
        wallEnd: Date.now(),
      }),
    );
    // 'exit' (not 'close'): the moment the process is reaped, before its pipes drain.
    child.on('exit', (code, signal) => {
      const ms = performance.now() - t0;
      const wallEnd = Date.now();
      const finish = () => resolve({ ms, code, signal, stdout, stderr, wallStart: wall0, wallEnd });
      // Let the pipes drain so the captured output is complete.
      if (child.stdout || child.stderr) child.on('close', finish);
      else finish();
    });
  });
  return { child, pid: child.pid, done, stderr: () => stderr };
}

/** Run to completion; returns { ms, code, signal, stdout, stderr }. */
export function timed(file, args, opts) {
  return start(file, args, opts).done;
}

/**
 * Run to completion under bash and return the CPU it used as `ms`, user + system, children
 * included (bash's `times`, millisecond resolution): { ms, code }, the shape interleave() takes.
 * The command's own output is discarded.
 * @param {string} file @param {string[]} args @param {{ env?: NodeJS.ProcessEnv }} [opts]
 */
export async function cpuTimed(file, args, opts = {}) {
  const script = '"$@" </dev/null >/dev/null 2>&1; code=$?; times; exit $code';
  const r = await start('bash', ['-c', script, 'bash', file, ...args], { env: opts.env, stdout: true }).done;
  // `times` prints the shell's own user/system line, then its children's.
  const line = r.stdout.trim().split('\n').at(-1) ?? '';
  const secs = [...line.matchAll(/(\d+)m([\d.]+)s/g)].map((m) => Number(m[1]) * 60 + Number(m[2]));
  return { ms: secs.length === 2 ? (secs[0] + secs[1]) * 1000 : NaN, code: r.code };
}

/**
 * Warm-up (each contender once, untimed), then n iterations, iteration i running every
 * contender once in an order rotated by i, so drift and background load hit all alike.
 * `run(c)` starts contender c and resolves with its timed() result. Returns every timed result
 * per contender name, the samples (ms; NaN for a failed process: it is no figure) and the
 * failed runs in the order they happened.
 * @template {{ name: string }} C @param {C[]} contenders @param {number} n
 * @param {(c: C) => Promise<{ ms: number, code: number | null }>} run
 */
export async function interleave(contenders, n, run) {
  const runs = Object.fromEntries(contenders.map((c) => [c.name, []]));
  const failed = [];
  for (const c of contenders) await run(c);
  for (let i = 0; i < n; i++) {
    for (const c of rotate(contenders, i)) {
      const r = await run(c);
      if (r.code !== 0) failed.push({ c, r });
      runs[c.name].push(r);
    }
  }
  const samples = Object.fromEntries(
    Object.entries(runs).map(([k, rs]) => [k, rs.map((r) => (r.code === 0 ? r.ms : NaN))]),
  );
  return { runs, samples, failed };
}

/**
 * Trials one after another: `trial(t)` for t = 0..n-1. A trial that throws adds its message to
 * the problems; one that returns `{ problem }` adds that and still counts as a result.
 * @template R @param {number} n @param {(t: number) => Promise<R & { problem?: string }>} trial
 */
export async function runTrials(n, trial) {
  const results = [];
  const problems = [];
  for (let t = 0; t < n; t++) {
    try {
      const r = await trial(t);
      results.push(r);
      if (r.problem) problems.push(r.problem);
    } catch (err) {
      problems.push(err.message);
    }
  }
  return { results, problems };
}

/**
 * Sleep to a spread of phases of a periodic cycle: trial t of n waits baseMs, plus t/n of
 * periodMs, plus up to 100 ms of jitter.
 */
export function phaseSleep(baseMs, periodMs, t, n) {
  return sleep(baseMs + Math.round((periodMs * t) / Math.max(1, n)) + Math.random() * 100);
}

/** { VmHWM, VmRSS, ... } in kB from /proc/<pid>/status, or undefined when gone. */
export function procStatus(pid) {
  try {
    const out = {};
    for (const line of readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')) {
      const m = /^(Vm\w+|Rss\w+):\s+(\d+) kB/.exec(line);
      if (m) out[m[1]] = Number(m[2]);
    }
    return out;
  } catch {
    return undefined;
  }
}

/** Poll `fn` every `everyMs` until it returns a truthy value or `timeoutMs` passes. */
export async function waitFor(fn, { timeoutMs = 30_000, everyMs = 10, what = 'condition' } = {}) {
  const end = performance.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (performance.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** Lines of a file (missing file: none). */
export function fileLines(file) {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter(Boolean);
}

/** Parse pino JSON lines from a runner's stderr (non-JSON lines are skipped). */
export function logLines(stderr) {
  const out = [];
  for (const line of stderr.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      out.push(JSON.parse(line));
    } catch {
      // not ours
    }
  }
  return out;
}

/** A shell snippet a child runs first: append "<wall ns> <pid> <runner pid>" to FILE. */
export function stampCmd(file) {
  return `echo "$(date +%s%N) $$ $PPID" >> '${file}'`;
}

/** The parent of `pid` (/proc/<pid>/stat), or undefined once it is gone. */
export function parentOf(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return undefined;
  }
}

/**
 * Which of `pids` started `pid`: its parent, or its parent's parent (leasejob's child runs under
 * a guard), up to a few generations; undefined when none of them is an ancestor (or one is gone).
 */
export function ancestorIn(pid, pids) {
  for (let p = pid, depth = 0; p !== undefined && p > 1 && depth < 4; p = parentOf(p), depth++)
    if (pids.has(p)) return p;
  return undefined;
}

/** Parse a stamp line written by stampCmd: { wallMs, pid, ppid }. */
export function parseStamp(line) {
  const [ns, pid, ppid] = line.trim().split(/\s+/);
  return { wallMs: Number(BigInt(ns) / 1000n) / 1000, pid: Number(pid), ppid: Number(ppid) };
}

/** The first stamp in FILE, parsed, or undefined while there is none. */
export function readStamp(file) {
  const line = fileLines(file)[0];
  return line ? parseStamp(line) : undefined;
}

/** Wait for the first stamp in FILE (a child has started) and parse it. */
export function waitStamp(file, what, timeoutMs = 30_000) {
  return waitFor(() => readStamp(file), { what, timeoutMs });
}
