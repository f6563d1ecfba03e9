// A process as /proc/<pid>/stat shows it (Linux): its state letter, its process group and its
// start time, which tells a process from a later one that got the same pid. And stopping one.
import { readFileSync } from 'node:fs';
import { signalGroup, signalPid } from './signal.mjs';

/**
 * @param {number} pid
 * @param {number | string} [tid] one of its threads instead (/proc/<pid>/task/<tid>/stat)
 * @returns {{ state: string, pgrp: number, starttime: string } | undefined} undefined when there is no such entry
 */
export function procStat(pid, tid) {
  try {
    const text = readFileSync(tid === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${tid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces and ')': fields 3 on
    // follow the last ')'. pgrp is field 5, starttime field 22.
    const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { state: f[0], pgrp: Number(f[2]), starttime: f[19] };
  } catch {
    return undefined;
  }
}

/** Alive and not a zombie or dead (orphans here are reparented to a PID 1 that may reap them late, or never). */
export function isAlive(pid) {
  if (!signalPid(pid, 0)) return false;
  const st = procStat(pid);
  return st !== undefined && st.state !== 'Z' && st.state !== 'X';
}

/**
 * `signal` (SIGTERM by default), up to graceMs for it to exit and its pipes to close (what it
 * printed has been read), then SIGKILL. Nothing when it has already exited.
 * @param {import('node:child_process').ChildProcess} child @param {number} graceMs
 * @param {NodeJS.Signals} [signal]
 */
export async function stopProcess(child, graceMs, signal = 'SIGTERM') {
  const running = () => child.exitCode === null && child.signalCode === null;
  if (!running()) return;
  let timer;
  const gone = new Promise((resolve) => child.once('close', resolve));
  child.kill(signal);
  await Promise.race([gone, new Promise((resolve) => (timer = setTimeout(resolve, graceMs)))]);
  clearTimeout(timer);
  if (running()) child.kill('SIGKILL');
}

/**
 * A signal that tolerates a process that has already exited (ESRCH), as one that was only
 * paused for a while may have done on a busy machine; a negative pid is the group -pid, as for
 * kill(2). Returns whether the signal was delivered. Through test/helpers/signal.mjs, so pid 0,
 * 1 and the test's own process and group are refused.
 * @param {number} pid @param {NodeJS.Signals} signal
 */
export function signalIfAlive(pid, signal) {
  return pid < 0 ? signalGroup(-pid, signal) : signalPid(pid, signal);
}
