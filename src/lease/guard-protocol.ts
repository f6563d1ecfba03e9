// What leasejob and its guard say to each other over the guard's control socket (its fd 3), and
// how the guard is started. One line per message, `keyword[ value]\n`, so that the native guard
// (src/native/guard.c) reads it into fixed buffers without allocating; the Node guard
// (guard.ts) speaks the same.
//
//   leasejob -> guard, before the start:  file F | arg A (each) | env K=V (each) | cwd D |
//                                         user UID GID | grace MS | stop MS | start
//   leasejob -> guard, after it:          stop MS (after each renewal) | ping N | done
//   guard -> leasejob:                    pid N | spawn-error ECODE | exit CODE | signal N |
//                                         deadline (it stopped the group) | pong N | error protocol
//                                         (spawn-error ETIME: the stop point had passed at the
//                                         start, so the command was never started)
//
// F, A, K=V, D are percent-encoded: `%` as %25 and a newline as %0A (any byte may be encoded;
// none may decode to NUL). MS of `stop` is leasejob's stop point in whole milliseconds on
// CLOCK_MONOTONIC (process.hrtime), or `-` for none; the guard converts it at once to its own
// CLOCK_BOOTTIME, which keeps counting while the machine is suspended (boot-clock.ts).

/** The environment variable that starts the single file as the guard instead of the CLI. */
export const GUARD_ENV = 'LEASEJOB_GUARD';
/** `off`: use the Node guard even where a native one is shipped. */
export const NATIVE_GUARD_ENV = 'LEASEJOB_NATIVE_GUARD';
/** The guard's end of the control socket. */
export const CONTROL_FD = 3;

export interface GuardStart {
  file: string;
  args: string[];
  env: Record<string, string>;
  cwd: string;
  /** The child's user and group, when leasejob (root) starts it as another user without setpriv. */
  uid?: number;
  gid?: number;
  /** When to SIGTERM the group (monotonic ms), null for no deadline; SIGKILL graceMs later. */
  stopAtMs: number | null;
  graceMs: number;
}

export type FromGuard =
  | { pid: number }
  | { spawnError: string }
  | { exit: number }
  | { signal: number }
  | { deadline: true }
  | { pong: number }
  | { error: string };

/** A string as a line's value: `%` and newline escaped. A NUL cannot reach a command. */
export function encodeValue(s: string): string {
  if (s.includes('\0'))
    throw Object.assign(new Error('a NUL byte in the command or its environment'), { code: 'EINVAL' });
  return s.replaceAll('%', '%25').replaceAll('\n', '%0A');
}

const wholeMs = (ms: number): string => String(Math.max(0, Math.floor(ms)));

export const stopLine = (stopAtMs: number | null): string =>
  `stop ${stopAtMs === null || !Number.isFinite(stopAtMs) ? '-' : wholeMs(stopAtMs)}\n`;

/** Everything the guard needs to start the child, ending with `start`. */
export function startLines(start: GuardStart): string {
  const lines = [`file ${encodeValue(start.file)}\n`];
  for (const a of start.args) lines.push(`arg ${encodeValue(a)}\n`);
  for (const [k, v] of Object.entries(start.env)) lines.push(`env ${encodeValue(`${k}=${v}`)}\n`);
  lines.push(`cwd ${encodeValue(start.cwd)}\n`);
  if (start.uid !== undefined) lines.push(`user ${start.uid} ${start.gid ?? start.uid}\n`);
  lines.push(`grace ${wholeMs(start.graceMs)}\n`, stopLine(start.stopAtMs), 'start\n');
  return lines.join('');
}

/** One line from the guard (without its newline); undefined when it is none of ours. */
export function parseFromGuard(line: string): FromGuard | undefined {
  const space = line.indexOf(' ');
  const keyword = space < 0 ? line : line.slice(0, space);
  const value = space < 0 ? '' : line.slice(space + 1);
  const n = /^-?\d{1,18}$/.test(value) ? Number(value) : NaN;
  switch (keyword) {
    case 'pid':
    case 'exit':
    case 'signal':
    case 'pong':
      return Number.isSafeInteger(n) ? ({ [keyword]: n } as FromGuard) : undefined;
    case 'spawn-error':
      return /^E[A-Z0-9]+$/.test(value) ? { spawnError: value } : undefined;
    case 'deadline':
      return { deadline: true };
    case 'error':
      return { error: value };
    default:
      return undefined;
  }
}

/**
 * Splits what a socket delivers into lines, calling `onLine` with each whole one (latin1: bytes
 * as they came, decoded by whoever needs the text).
 */
export function lineReader(onLine: (line: string) => void): (chunk: string) => void {
  let buffered = '';
  return (chunk) => {
    buffered += chunk;
    for (let i = buffered.indexOf('\n'); i >= 0; i = buffered.indexOf('\n')) {
      const line = buffered.slice(0, i);
      buffered = buffered.slice(i + 1);
      onLine(line);
    }
  };
}
