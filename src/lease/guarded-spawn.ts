// leasejob's side of the guard (guard.ts): start it, hand it the command, the lease deadline and
// each extension, and learn from it the child's pid and how the child ended.
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { Socket } from 'node:net';
import { packageRoot, runsFromAssets } from '../package-root.js';
import { GUARD_ENV, type FromGuard, type GuardStart, type ToGuard } from './guard-protocol.js';

export interface GuardedChild {
  /** The child's pid, also its process group's id. */
  readonly pid: number;
  /** With `capture`: the pipes the child writes to (the guard passes them on untouched). */
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /** The child's end, as the guard saw it; if the guard itself died first, the guard's. */
  readonly exited: Promise<{ exitCode: number | null; signal: NodeJS.Signals | null }>;
  /** The lease's new stop point (monotonic ms), after a renewal; null: none. */
  setStopAt(stopAtMs: number | null): void;
  /** Supervision is over (the group is gone or given up on): the guard may go without stopping anything. */
  release(): void;
}

/**
 * The single file started through glibc's loader (the injected directory anywhere but /leasejob,
 * deploy/inject/start): process.execPath is then the loader, so the guard is started the same way.
 */
function loaderArgs(): string[] {
  if (!path.basename(process.execPath).startsWith('ld-linux')) return [];
  return ['--argv0', process.argv0, '--library-path', path.dirname(process.execPath), process.argv0];
}

/** How the guard is started: the package's dist/guard.cjs, or the single file itself when it is one. */
function guardCommand(): { file: string; args: string[]; env: Record<string, string> } {
  // Nothing of ours in its environment (NODE_OPTIONS could load code into it): the child's comes over the socket.
  if (runsFromAssets()) return { file: process.execPath, args: loaderArgs(), env: { [GUARD_ENV]: '1' } };
  return { file: process.execPath, args: [path.join(packageRoot(), 'dist', 'guard.cjs')], env: {} };
}

interface Launched {
  guard: ChildProcess;
  control: Socket;
  capture: boolean;
  file: string;
}

function launchGuard(capture: boolean): Launched {
  const cmd = guardCommand();
  const guard = spawn(cmd.file, cmd.args, {
    env: cmd.env,
    stdio: capture ? ['inherit', 'pipe', 'pipe', 'pipe'] : ['inherit', 'inherit', 'inherit', 'pipe'],
    // A session of its own: a terminal's Ctrl-C or a signal to leasejob's group is not the guard's
    // (leasejob passes those on to the child's group itself).
    detached: true,
  });
  guard.on('error', () => {});
  const control = guard.stdio[3] as Socket | null;
  control?.on('error', () => {});
  return { guard, control: control!, capture, file: cmd.file };
}

let warm: Launched | undefined;

/**
 * Start the guard now, before the lease is asked for: its start (a Node process, tens of
 * milliseconds) then overlaps the connection and the acquire instead of delaying the child.
 * Unused (the run skips, fails, exits), it sees its socket close and exits; it keeps nothing
 * of ours alive meanwhile.
 */
export function prewarmGuard(capture: boolean): void {
  if (warm !== undefined) return;
  warm = launchGuard(capture);
  warm.guard.unref();
  warm.control?.unref();
}

/**
 * Start the guard (or take the one started ahead), which starts `file args` in a process group
 * of its own; resolves once the child is running (or rejects with the error its spawn gave).
 */
export async function spawnGuarded(start: GuardStart, capture: boolean): Promise<GuardedChild> {
  const ahead = warm;
  warm = undefined;
  const usable = ahead && ahead.capture === capture && ahead.guard.exitCode === null && ahead.guard.signalCode === null;
  if (ahead && !usable) ahead.guard.kill('SIGKILL');
  const { guard, control, file } = usable ? ahead : launchGuard(capture);
  if (guard.pid === undefined) {
    const cause = await new Promise<Error>((resolve) => guard.once('error', resolve));
    throw Object.assign(new Error(`cannot start leasejob's guard (${file}): ${cause.message}`), { cause });
  }
  guard.ref();
  control.ref();
  const send = (m: ToGuard): void => {
    if (control.writable) control.write(`${JSON.stringify(m)}\n`);
  };

  let onPid: (m: FromGuard) => void = () => {};
  const first = new Promise<FromGuard>((resolve) => (onPid = resolve));
  let reported: ((r: { exitCode: number | null; signal: NodeJS.Signals | null }) => void) | undefined;
  const exited = new Promise<{ exitCode: number | null; signal: NodeJS.Signals | null }>((r) => (reported = r));
  let childPid: number | undefined = undefined;
  let exitSeen = false;
  let buffered = '';
  control.setEncoding('utf8');
  control.on('data', (chunk: string) => {
    buffered += chunk;
    for (let i = buffered.indexOf('\n'); i >= 0; i = buffered.indexOf('\n')) {
      const m = JSON.parse(buffered.slice(0, i)) as FromGuard;
      buffered = buffered.slice(i + 1);
      if ('pid' in m || 'spawnError' in m) onPid(m);
      else if ('exit' in m) {
        exitSeen = true;
        reported?.({ exitCode: m.exit, signal: m.signal });
      }
    }
  });
  // The guard's own end counts once its socket is read to the end (what it said came first).
  let guardEnd: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  let controlClosed = false;
  const onGuardGone = (): void => {
    if (guardEnd === undefined || !controlClosed) return;
    const { code, signal } = guardEnd;
    onPid({
      spawnError: `leasejob's guard ended (${signal ?? `exit ${code}`}) before it started the command`,
      errno: undefined,
    });
    if (exitSeen) return;
    // The guard died without telling the child's end (killed by someone, the OOM killer): the
    // child is unsupervised; stopped at once, as a runner's death stops it.
    if (childPid !== undefined) {
      try {
        process.kill(-childPid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    reported?.({ exitCode: signal === null ? code : null, signal: signal ?? (code === null ? 'SIGKILL' : null) });
  };
  const onGuardExit = (code: number | null, signal: NodeJS.Signals | null): void => {
    guardEnd = { code, signal };
    onGuardGone();
  };
  const onControlClose = (): void => {
    controlClosed = true;
    onGuardGone();
  };
  guard.once('exit', onGuardExit);
  control.once('close', onControlClose);

  send({ start });
  const answer = await first;
  if (!('pid' in answer)) {
    const message = 'spawnError' in answer ? answer.spawnError : 'unexpected answer';
    throw Object.assign(new Error(message), { code: 'spawnError' in answer ? answer.errno : undefined });
  }
  childPid = answer.pid;
  return {
    pid: answer.pid,
    stdout: guard.stdout,
    stderr: guard.stderr,
    exited,
    setStopAt(stopAtMs) {
      send({ stopAtMs });
    },
    release() {
      // Nothing of the guard's end is ours to handle any more: it goes at its own pace, and
      // what runs meanwhile does not depend on when (the single file's code cache, written at
      // the build's priming run's exit, is then the same at every build).
      guard.off('exit', onGuardExit);
      control.off('close', onControlClose);
      send({ done: true });
      control.end();
      guard.unref();
      control.unref();
    },
  };
}
