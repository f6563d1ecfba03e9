// leasejob's side of the guard (the native src/native/guard.c where one is shipped for this
// platform, else the Node guard.ts): start it, hand it the command, the lease's stop point and
// each move of it, make sure it still answers, and learn from it the child's pid and how the
// child ended.
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, statSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { Socket } from 'node:net';
import { monoNow } from '../clock.js';
import { packageRoot, runsFromAssets } from '../package-root.js';
import {
  GUARD_ENV,
  lineReader,
  NATIVE_GUARD_ENV,
  parseFromGuard,
  startLines,
  stopLine,
  type FromGuard,
  type GuardStart,
} from './guard-protocol.js';

/** How often leasejob asks its guard whether it still answers. */
const PING_INTERVAL_MS = 1_000;
// How long a guard may leave a ping unanswered, counted only while leasejob itself was awake to
// see it, before leasejob takes it for stopped (SIGSTOP by a child of the same user, a debugger):
// far above what answering costs (microseconds native, a turn of an idle event loop in Node),
// far below a lease's TTL.
const ANSWER_WITHIN_MS = 5_000;
// Before the guard has said anything (a Node guard still starting on a loaded host).
const FIRST_ANSWER_WITHIN_MS = 30_000;

export type GuardKind = 'native' | 'node';

export interface ChildEnd {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** The guard stopped answering: leasejob stopped the group and the guard; the child's own end is unknown. */
  guardLost?: true;
}

export interface GuardedChild {
  /** The child's pid, also its process group's id. */
  readonly pid: number;
  /** Which guard runs it, and its pid. */
  readonly guard: { kind: GuardKind; file: string; pid: number };
  /** With `capture`: the pipes the child writes to (the guard passes them on untouched). */
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /** The child's end, as the guard saw it; if the guard itself died first, the guard's. */
  readonly exited: Promise<ChildEnd>;
  /** The lease's new stop point (monotonic ms), after a renewal; null: none. */
  setStopAt(stopAtMs: number | null): void;
  /**
   * What to do when the guard stops answering (it is SIGKILLed once this resolves): stop the
   * child's group without it.
   */
  whenUnresponsive(stopGroup: () => Promise<void>): void;
  /** Supervision is over (the group is gone or given up on): the guard may go without stopping anything. */
  release(): void;
}

/**
 * The single file started through glibc's loader (the injected directory anywhere but /leasejob,
 * deploy/inject/start): process.execPath is then the loader, so the guard is started the same way.
 */
function throughLoader(): boolean {
  return path.basename(process.execPath).startsWith('ld-linux');
}
function loaderArgs(): string[] {
  if (!throughLoader()) return [];
  return ['--argv0', process.argv0, '--library-path', path.dirname(process.execPath), process.argv0];
}

function isExecutableFile(file: string): boolean {
  try {
    accessSync(file, fsConstants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

let nativeFound: { file: string | undefined } | undefined;

/**
 * The native guard built for this platform, where one is shipped: in the npm package under
 * dist/guard/linux-<arch>/, beside the single file (a two-file release, or the injected
 * /leasejob directory). Undefined elsewhere, or with LEASEJOB_NATIVE_GUARD=off.
 */
export function nativeGuardFile(): string | undefined {
  if (nativeFound !== undefined) return nativeFound.file;
  let file: string | undefined;
  const arch = process.arch;
  if (process.env[NATIVE_GUARD_ENV] !== 'off' && process.platform === 'linux' && (arch === 'x64' || arch === 'arm64')) {
    const candidates = runsFromAssets()
      ? [`leasejob-guard-linux-${arch}`, 'leasejob-guard'].map((name) =>
          path.join(path.dirname(throughLoader() ? process.argv0 : process.execPath), name),
        )
      : [path.join(packageRoot(), 'dist', 'guard', `linux-${arch}`, 'leasejob-guard')];
    file = candidates.find(isExecutableFile);
  }
  nativeFound = { file };
  return file;
}

/** How the guard is started: the native one, or Node running dist/guard.cjs, or the single file as the guard. */
function guardCommand(): { kind: GuardKind; file: string; args: string[]; env: Record<string, string> } {
  const native = nativeGuardFile();
  // Nothing of ours in its environment (NODE_OPTIONS could load code into it): the child's comes over the socket.
  if (native !== undefined) return { kind: 'native', file: native, args: [], env: {} };
  if (runsFromAssets()) return { kind: 'node', file: process.execPath, args: loaderArgs(), env: { [GUARD_ENV]: '1' } };
  return { kind: 'node', file: process.execPath, args: [path.join(packageRoot(), 'dist', 'guard.cjs')], env: {} };
}

interface Launched {
  guard: ChildProcess;
  control: Socket;
  capture: boolean;
  kind: GuardKind;
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
  return { guard, control: control!, capture, kind: cmd.kind, file: cmd.file };
}

let warm: Launched | undefined;

/**
 * Start the Node guard now, before the lease is asked for: its start (a Node process, tens of
 * milliseconds) then overlaps the connection and the acquire instead of delaying the child.
 * Unused (the run skips, fails, exits), it sees its socket close and exits; it keeps nothing of
 * ours alive meanwhile.
 */
export function prewarmGuard(capture: boolean): void {
  // The native guard starts in about a millisecond: started ahead it would only cost a process
  // to every run that never starts a child (a busy skip, each of a herd's contenders).
  if (warm !== undefined || nativeGuardFile() !== undefined) return;
  warm = launchGuard(capture);
  warm.guard.unref();
  warm.control?.unref();
}

const signalName = (n: number): NodeJS.Signals | null =>
  (Object.entries(osConstants.signals).find(([, v]) => v === n)?.[0] as NodeJS.Signals | undefined) ?? null;

/**
 * Pings the guard every PING_INTERVAL_MS; calls `lost` once when one goes unanswered for the
 * bound. Only time leasejob was awake counts: after a stall of ours (a paused process, a host
 * paused whole) the guard gets the bound again from when we woke.
 */
function heartbeat(
  send: (line: string) => void,
  lost: () => void,
): { first(): string; heard(): void; answered(n: number): void; stop(): void } {
  let seq = 0;
  let waiting: { n: number; since: number } | undefined;
  let lastBeat = monoNow();
  let heardOnce = false;
  /** A ping when none is awaited (written by `out`), else a look at how late the awaited one is. */
  const beat = (out: (line: string) => void = send): void => {
    const now = monoNow();
    if (waiting !== undefined && now - lastBeat > 2 * PING_INTERVAL_MS) waiting.since = now;
    lastBeat = now;
    if (waiting === undefined) {
      waiting = { n: ++seq, since: now };
      out(`ping ${waiting.n}`);
      return;
    }
    const bound = heardOnce ? ANSWER_WITHIN_MS : FIRST_ANSWER_WITHIN_MS;
    if (now - waiting.since < bound) return;
    // After the socket's pending reads (timers run before I/O in a turn of the loop).
    const late = waiting.n;
    setImmediate(() => {
      if (waiting?.n !== late) return;
      clearInterval(timer);
      lost();
    });
  };
  // beat itself (no wrapper): compiled by first(), so a run past a second compiles nothing more.
  const timer = setInterval(beat, PING_INTERVAL_MS);
  timer.unref();
  return {
    /**
     * The first ping, to send with the start: answered in the same read of the guard, before the
     * child's end, so that what a run compiles never depends on timing (the single file's code
     * cache, written at the end of the build's priming run, is the same at every build).
     */
    first() {
      let line = '';
      beat((l) => (line = l));
      return line;
    },
    heard() {
      heardOnce = true;
    },
    answered(n) {
      if (waiting?.n === n) waiting = undefined;
    },
    stop: () => clearInterval(timer),
  };
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
  const { guard, control, file, kind } = usable ? ahead : launchGuard(capture);
  if (guard.pid === undefined) {
    const cause = await new Promise<Error>((resolve) => guard.once('error', resolve));
    throw Object.assign(new Error(`cannot start leasejob's guard (${file}): ${cause.message}`), { cause });
  }
  guard.ref();
  control.ref();
  const send = (line: string): void => {
    if (control.writable) control.write(`${line.endsWith('\n') ? line : `${line}\n`}`);
  };

  let onPid: (m: FromGuard) => void = () => {};
  const first = new Promise<FromGuard>((resolve) => (onPid = resolve));
  let reported: ((r: ChildEnd) => void) | undefined;
  const exited = new Promise<ChildEnd>((r) => (reported = r));
  let childPid: number | undefined = undefined;
  let exitSeen = false;
  let lost = false;
  let stopWithoutGuard: (() => Promise<void>) | undefined;
  const beats = heartbeat(send, () => {
    lost = true;
    void (stopWithoutGuard?.() ?? Promise.resolve()).finally(() => guard.kill('SIGKILL'));
  });
  control.setEncoding('latin1');
  control.on(
    'data',
    lineReader((line) => {
      const m = parseFromGuard(line);
      if (m === undefined) return;
      beats.heard();
      if ('pong' in m) beats.answered(m.pong);
      else if ('pid' in m || 'spawnError' in m) onPid(m);
      else if ('error' in m) onPid({ error: `leasejob's guard could not read what leasejob said (${m.error})` });
      else if ('exit' in m || 'signal' in m) {
        exitSeen = true;
        beats.stop();
        reported?.('exit' in m ? { exitCode: m.exit, signal: null } : { exitCode: null, signal: signalName(m.signal) });
      }
    }),
  );
  // The guard's own end counts once its socket is read to the end (what it said came first).
  let guardEnd: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  let controlClosed = false;
  const onGuardGone = (): void => {
    if (guardEnd === undefined || !controlClosed) return;
    beats.stop();
    const { code, signal } = guardEnd;
    onPid({ error: `leasejob's guard ended (${signal ?? `exit ${code}`}) before it started the command` });
    if (exitSeen) return;
    // The guard died without telling the child's end (killed by someone, the OOM killer, or by
    // us when it stopped answering): the child is unsupervised; stopped at once, as a runner's
    // death stops it.
    if (childPid !== undefined) {
      try {
        process.kill(-childPid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    if (lost) reported?.({ exitCode: null, signal: null, guardLost: true });
    else reported?.({ exitCode: signal === null ? code : null, signal: signal ?? (code === null ? 'SIGKILL' : null) });
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

  send(`${startLines(start)}${beats.first()}`);
  const answer = await first;
  if (!('pid' in answer)) {
    beats.stop();
    const code = 'spawnError' in answer ? answer.spawnError : undefined;
    const message =
      code !== undefined ? `spawn ${start.file} ${code}` : 'error' in answer ? answer.error : 'unexpected answer';
    throw Object.assign(new Error(message), { code });
  }
  childPid = answer.pid;
  return {
    pid: answer.pid,
    guard: { kind, file, pid: guard.pid },
    stdout: guard.stdout,
    stderr: guard.stderr,
    exited,
    setStopAt(stopAtMs) {
      send(stopLine(stopAtMs));
    },
    whenUnresponsive(stopGroup) {
      stopWithoutGuard = stopGroup;
    },
    release() {
      // Nothing of the guard's end is ours to handle any more: it goes at its own pace, and
      // what runs meanwhile does not depend on when (the single file's code cache, written at
      // the build's priming run's exit, is then the same at every build).
      beats.stop();
      guard.off('exit', onGuardExit);
      control.off('close', onControlClose);
      send('done');
      control.end();
      guard.unref();
      control.unref();
    },
  };
}
