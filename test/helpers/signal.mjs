// Signals a test may send, and the pid files it reads them from. A pid file read between its
// creation and its write holds '' (Number('') is 0), and kill(0) or kill(-1) reaches the whole
// test run's process group or every process of the user: the suite then dies with no summary.
// So a pid is read only when the file holds a whole one, fixtures write their pid files
// atomically (writeFileAtomic), and every signal refuses pid <= 1, this process and its group.
// eslint.config.js forbids a bare process.kill in test/ outside this file.
import { readFileSync, renameSync, writeFileSync } from 'node:fs';

/** The process group of this process (field 5 of /proc/self/stat). */
function ownGroup() {
  const text = readFileSync('/proc/self/stat', 'utf8');
  return Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[2]);
}

/** @param {unknown} pid */
function refuse(pid, what) {
  if (!Number.isSafeInteger(pid) || /** @type {number} */ (pid) <= 1)
    throw new Error(`refusing to signal ${what} ${String(pid)}: not a process id (a half-written pid file?)`);
  if (pid === process.pid || pid === ownGroup())
    throw new Error(`refusing to signal ${what} ${String(pid)}: the test's own process or group`);
}

/**
 * Send `signal` to one process. Returns false when it has already exited (ESRCH).
 * @param {number} pid @param {NodeJS.Signals | 0} signal
 */
export function signalPid(pid, signal) {
  refuse(pid, 'process');
  return send(pid, signal);
}

/**
 * Send `signal` to a process group (kill(-pgid)). Returns false when it is empty (ESRCH).
 * @param {number} pgid @param {NodeJS.Signals | 0} signal
 */
export function signalGroup(pgid, signal) {
  refuse(pgid, 'process group');
  return send(-pgid, signal);
}

function send(target, signal) {
  try {
    process.kill(target, signal);
    return true;
  } catch (e) {
    if (/** @type {NodeJS.ErrnoException} */ (e).code === 'ESRCH') return false;
    throw e;
  }
}

/**
 * The pid a pid file holds, or undefined while it is missing or does not hold a whole pid
 * (its first line all digits, above 1; what follows that line is the fixture's own).
 * @param {string} file @returns {number | undefined}
 */
export function readPidFile(file) {
  let text;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
  const whole = /^(\d+)(\n|$)/.exec(text);
  if (whole === null) return undefined;
  const pid = Number(whole[1]);
  return pid > 1 ? pid : undefined;
}

/**
 * Write `text` to `file` so that a reader sees nothing or all of it: a temporary name in the
 * same directory, then rename.
 * @param {string} file @param {string} text
 */
export function writeFileAtomic(file, text) {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, file);
}
