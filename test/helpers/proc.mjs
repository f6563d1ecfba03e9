// A process as /proc/<pid>/stat shows it (Linux): its state letter and its start time, which
// tells a process from a later one that got the same pid.
import { readFileSync } from 'node:fs';

/**
 * @param {number} pid
 * @param {number | string} [tid] one of its threads instead (/proc/<pid>/task/<tid>/stat)
 * @returns {{ state: string, starttime: string } | undefined} undefined when there is no such entry
 */
export function procStat(pid, tid) {
  try {
    const text = readFileSync(tid === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${tid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces and ')': fields 3 on
    // follow the last ')'. starttime is field 22.
    const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { state: f[0], starttime: f[19] };
  } catch {
    return undefined;
  }
}

/** Alive and not a zombie or dead (orphans here are reparented to a PID 1 that may reap them late, or never). */
export function isAlive(pid) {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const st = procStat(pid);
  return st !== undefined && st.state !== 'Z' && st.state !== 'X';
}
