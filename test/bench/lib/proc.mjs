// Process helpers for the bench: run and time a process, watch /proc, wait for things.
import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// The checkout whose bin/ and dist/ are measured: this one, or LEASEJOB_BENCH_ROOT (another
// checkout or a snapshot of this one, e.g. to bench a build while src/ is being edited).
export const ROOT = path.resolve(process.env.LEASEJOB_BENCH_ROOT ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..'));
export const BIN = path.join(ROOT, 'bin', 'leasejob.js');
/** test/bench/ of this checkout (fixtures live here whatever ROOT is). */
export const BENCH_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const NODE = process.execPath;

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Start a process; `done` resolves with wall time from just before spawn to the 'exit' event,
 * the exit code/signal, and the captured stdout/stderr (when piped).
 * @param {string} file @param {string[]} args
 * `stdoutFile`: stdout goes to that file (a regular file: writes never block or get cut).
 * @param {{ env?: NodeJS.ProcessEnv, cwd?: string, capture?: boolean, stdout?: boolean, stdoutFile?: string }} [opts]
 */
export function start(file, args, opts = {}) {
  const outFd = opts.stdoutFile ? openSync(opts.stdoutFile, 'w') : undefined;
  const t0 = performance.now();
  const wall0 = Date.now();
  const child = spawn(file, args, {
    env: opts.env ?? process.env,
    cwd: opts.cwd ?? ROOT,
    stdio: ['ignore', outFd ?? (opts.stdout ? 'pipe' : 'ignore'), opts.capture === false ? 'ignore' : 'pipe'],
  });
  if (outFd !== undefined) closeSync(outFd);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d) => (stdout += d));
  child.stderr?.on('data', (d) => (stderr += d));
  const done = new Promise((resolve) => {
    child.on('error', (err) => resolve({ ms: performance.now() - t0, code: -1, signal: null, stdout, stderr: String(err), wallStart: wall0, wallEnd: Date.now() }));
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
  return { child, pid: child.pid, t0, wallStart: wall0, done };
}

/** Run to completion; returns { ms, code, signal, stdout, stderr }. */
export function timed(file, args, opts) {
  return start(file, args, opts).done;
}

/** State letter from /proc/<pid>/stat, or undefined when the pid is gone. */
export function procState(pid) {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return text.slice(text.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}

/** Alive and not a zombie (a zombie has done all it will ever do). */
export function alive(pid) {
  const s = procState(pid);
  return s !== undefined && s !== 'Z' && s !== 'X';
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

/** Parse a stamp line written by stampCmd: { wallMs, pid, ppid }. */
export function parseStamp(line) {
  const [ns, pid, ppid] = line.trim().split(/\s+/);
  return { wallMs: Number(BigInt(ns) / 1000n) / 1000, pid: Number(pid), ppid: Number(ppid) };
}
