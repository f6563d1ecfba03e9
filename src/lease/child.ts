// Child supervision: spawn the command in its own process group, signal the group, stop it with a grace period.
import { accessSync, constants as fsConstants, readdirSync, readFileSync, statSync } from 'node:fs';
import type { Readable } from 'node:stream';
import { constants as osConstants } from 'node:os';
import path from 'node:path';
import { monoNow, sleep } from '../clock.js';
import { ExitCode, LeasejobError, LeaseUnavailableError } from '../errors.js';
import { nativeGuardFile, spawnGuarded, type GuardedChild, type GuardKind } from './guarded-spawn.js';
import type { TailBuffer } from './output-tail.js';

export interface ChildResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** 0 on success; the child's code; or 128+N when killed by signal N; 70 when the guard was lost */
  code: number;
  /** The guard stopped answering: leasejob stopped the child's group itself; the child's own end is unknown. */
  guardLost?: true;
}

export interface ChildHandle {
  readonly pid: number;
  /** The guard the child runs under: native (src/native/guard.c) or Node (guard.ts). */
  readonly guard: { kind: GuardKind; file: string; pid: number };
  /** resolves once the child process has exited (never rejects) */
  readonly exited: Promise<ChildResult>;
  /** send a signal to the child's whole process group (no-op once exited) */
  signal(sig: NodeJS.Signals): void;
  /** whether any live process is left in the child's group (the child itself, or what it started) */
  groupAlive(): boolean;
  /**
   * SIGTERM (or `first`) to the group, wait up to graceMs, then SIGKILL to the group; resolves with the
   * result when the child is gone. Idempotent: concurrent calls share one stop; a later call with a
   * shorter grace may shorten it.
   */
  /** settleMs: how long to wait after SIGKILL for the group's last members (default 1 s). */
  stop(opts: { graceMs: number; first?: NodeJS.Signals; settleMs?: number }): Promise<ChildResult>;
  /**
   * With `capture`: resolves once the child's stdout and stderr have both closed, or after
   * `limitMs` (a process outside the group may hold them open); the tail is then final.
   */
  outputClosed(limitMs: number): Promise<void>;
  /** The lease's stop point moved (a renewal): the guard's deadline with it (monotonic ms; null: none). */
  setStopAt(stopAtMs: number | null): void;
  /** Supervision of the group is over: the guard goes without stopping anything. */
  release(): void;
  /** With `capture`: resolves once what the child wrote has been written on to our stdout and stderr, or after `limitMs`. */
  outputFlushed(limitMs: number): Promise<void>;
}

/** The command could not be started: 127 when not found, 126 when not executable, as a shell reports it. */
export class SpawnError extends LeasejobError {
  constructor(message: string, exitCode: 126 | 127, options?: { cause?: unknown }) {
    super(message, 'E_SPAWN', exitCode, options);
  }
}

/**
 * The guard stopped answering (SIGSTOPped by a process of the child's user, held in a
 * debugger): leasejob stopped the child's group itself and killed the guard. Exit 70.
 */
export class GuardLostError extends LeasejobError {
  constructor(message: string) {
    super(message, 'E_GUARD_LOST', ExitCode.internal);
  }
}

// How often stop() looks again at the group while waiting out the grace. Short enough that stop() returns
// soon after the last member dies, long enough that a 10s grace costs ~200 cheap checks.
const STOP_POLL_MS = 50;

// How long stop() waits after SIGKILL for the group's last members to go, unless told: the
// runner passes the margin it keeps between the end of the grace and the lease's expiry.
const KILL_SETTLE_MS = 1_000;

// What execvp (and libuv) search when the child's env has no PATH at all.
const DEFAULT_PATH = '/usr/bin:/bin';

let setprivCache: { path: string | undefined } | undefined;

// Looked up once: the answer does not change while we run, and startChild may be called per attempt.
function findSetpriv(): string | undefined {
  if (setprivCache) return setprivCache.path;
  let found: string | undefined;
  if (process.platform === 'linux') {
    const dirs = ['/usr/bin', '/bin', ...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean)];
    found = dirs.map((dir) => path.join(dir, 'setpriv')).find(isExecutableFile);
  }
  setprivCache = { path: found };
  return found;
}

/**
 * Whether our parent is tini as a container's PID 1 (the Helm chart's injected start, or
 * `docker run --init`): if we die, even by SIGKILL, tini exits with us and the kernel kills
 * every process left in the container's PID namespace, the child included.
 */
function underContainerTini(): boolean {
  if (process.platform !== 'linux' || process.ppid !== 1) return false;
  try {
    return ['tini', 'docker-init'].includes(readFileSync('/proc/1/comm', 'utf8').trim());
  } catch {
    return false;
  }
}

/**
 * How a runner that dies by SIGKILL takes its child with it: `setpriv` on Linux with
 * util-linux, else a container's tini as PID 1 (the namespace dies with us), else nothing.
 */
export function parentDeathSignalSupport(): 'setpriv' | 'container-init' | 'none' {
  if (findSetpriv() !== undefined) return 'setpriv';
  return underContainerTini() ? 'container-init' : 'none';
}

/**
 * The program and argv actually spawned. With parent-death signal, util-linux `setpriv` sets
 * PR_SET_PDEATHSIG=SIGKILL and then execs the command, so the pid we hold is the command's own.
 * pdeathsig only reaches that direct child: the rest of its group is killed by the runner on a normal
 * stop, and is left running if the runner itself is SIGKILLed. Other platforms get no parent-death signal.
 */
export function buildSpawnArgs(
  command: string,
  args: string[],
  parentDeathSignal: boolean,
  runAs?: RunAs,
): { file: string; args: string[]; uid?: number; gid?: number } {
  const setpriv = parentDeathSignal || runAs ? findSetpriv() : undefined;
  // Without setpriv, Node's spawn changes the ids, and leaves no supplementary group.
  if (setpriv === undefined)
    return { file: command, args: [...args], ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}) };
  const ids = runAs
    ? ['--reuid', String(runAs.uid), '--regid', String(runAs.gid), runAs.name ? '--init-groups' : '--clear-groups']
    : [];
  const pdeath = parentDeathSignal ? ['--pdeathsig', 'SIGKILL'] : [];
  return { file: setpriv, args: [...pdeath, ...ids, '--', command, ...args] };
}

/**
 * The user and group the child runs as (run --user, --group): setpriv's --reuid, --regid and
 * --init-groups (the user's supplementary groups, as runuser sets them), else Node's uid and
 * gid. `name`: the user's name when it has an entry in /etc/passwd.
 */
export interface RunAs {
  uid: number;
  gid: number;
  name?: string;
  home?: string;
}

/** Why the guard could not start the command, as the error the run reports. */
function spawnFailure(command: string, cause: unknown): LeasejobError {
  // The guard refused to start past the lease's stop point: a lease lost before the start.
  if ((cause as NodeJS.ErrnoException).code === 'ETIME')
    return new LeaseUnavailableError('lease acquired too late to start the task safely', 'E_LEASE_LATE', { cause });
  const code = (cause as NodeJS.ErrnoException).code === 'EACCES' ? 126 : 127;
  return new SpawnError(`Cannot start \`${command}\`: ${(cause as Error).message}`, code, { cause });
}

/** Spawn `command args` as the leader of its own process group, with exactly `env`. */
export async function startChild(
  command: string,
  args: string[],
  opts: {
    env: Record<string, string>;
    parentDeathSignal?: boolean;
    cwd?: string;
    capture?: TailBuffer | undefined;
    /** Start the child as this user and group (needs root). */
    runAs?: RunAs | undefined;
    /** The lease's stop point (monotonic ms): the guard stops the group then, SIGKILL graceMs later. */
    stopAtMs?: number | undefined;
    graceMs?: number | undefined;
  },
): Promise<ChildHandle> {
  const cwd = opts.cwd ?? process.cwd();
  // Checked up front because behind setpriv a missing command would only show up as setpriv's exit
  // status, indistinguishable from the command's own 126/127.
  resolveCommand(command, opts.env.PATH ?? DEFAULT_PATH, cwd);

  // The native guard arms the child's parent-death signal itself; setpriv is then needed only
  // for another user (its --init-groups), and still sets the signal after changing the ids.
  const pdeath = (opts.parentDeathSignal ?? true) && (nativeGuardFile() === undefined || opts.runAs !== undefined);
  const spawnArgs = buildSpawnArgs(command, args, pdeath, opts.runAs);
  // Through the guard (guard.ts), which stops the child's group if we die or stall past the
  // lease's deadline. node:child_process, not execa: importing execa would be a large part of
  // every run's start (docs/performance.md), and we use none of its features here.
  let subprocess: GuardedChild;
  try {
    subprocess = await spawnGuarded(
      {
        ...spawnArgs,
        env: opts.env, // exactly what the caller decided the child sees (e.g. no DATABASE_URL)
        cwd,
        stopAtMs: opts.stopAtMs ?? null,
        graceMs: opts.graceMs ?? 0,
      },
      // The child's output is the user's, passed through untouched: inherited, or with
      // --record-output through pipes that copy it on byte for byte, keeping its tail.
      opts.capture !== undefined,
    );
  } catch (cause) {
    throw spawnFailure(command, cause);
  }
  const pid = subprocess.pid;
  const copies = opts.capture
    ? [copyOutput(subprocess.stdout!, 1, opts.capture), copyOutput(subprocess.stderr!, 2, opts.capture)]
    : [];

  // The child's end as the guard reaped it: once, whoever caused it.
  let leaderExited = false;
  const exited = subprocess.exited.then(({ exitCode, signal, guardLost }) => {
    leaderExited = true;
    return guardLost ? { exitCode, signal, code: ExitCode.internal, guardLost } : toResult(exitCode, signal);
  });
  // A guard that stopped answering can neither stop the group nor say how the child ended: the
  // group is stopped from here, then the guard is killed.
  subprocess.whenUnresponsive(() => stopWithoutGuard(pid, opts.graceMs ?? 0));

  let stopping: Promise<ChildResult> | undefined;
  let stopDeadline = Infinity;

  let settleMs = KILL_SETTLE_MS;
  const stopGroup = async (first: NodeJS.Signals): Promise<ChildResult> => {
    // After the leader is gone its pid may be reused once the group is empty: only signal a live group.
    if (leaderExited && !groupHasLiveMember(pid)) return exited;
    signalGroup(pid, first);
    for (;;) {
      // Done when the leader and everything it left in its group are gone, not just the leader.
      if (leaderExited && !groupHasLiveMember(pid)) return exited;
      const remaining = stopDeadline - monoNow();
      if (remaining <= 0) break;
      const pause = sleep(Math.min(STOP_POLL_MS, remaining));
      await (leaderExited ? pause : Promise.race([exited, pause]));
    }
    signalGroup(pid, 'SIGKILL');
    // A process takes SIGKILL when it next leaves the kernel: one in uninterruptible I/O (D
    // state) lingers. Waited for within the margin kept before expiry, never longer.
    const settleBy = monoNow() + settleMs;
    await exited;
    while (groupHasLiveMember(pid) && monoNow() < settleBy) await sleep(Math.min(STOP_POLL_MS, settleBy - monoNow()));
    return exited;
  };

  return {
    pid,
    guard: subprocess.guard,
    exited,
    signal(sig) {
      if (!leaderExited) signalGroup(pid, sig);
    },
    groupAlive() {
      return !leaderExited || groupHasLiveMember(pid);
    },
    stop({ graceMs, first = 'SIGTERM', settleMs: settle }) {
      // NaN or negative grace means none; Infinity means wait for the child however long it takes.
      const grace = graceMs > 0 ? graceMs : 0;
      if (settle !== undefined) settleMs = Math.min(settleMs, Math.max(0, settle));
      stopDeadline = Math.min(stopDeadline, monoNow() + grace);
      stopping ??= stopGroup(first);
      return stopping;
    },
    setStopAt(stopAtMs) {
      subprocess.setStopAt(stopAtMs);
    },
    release() {
      subprocess.release();
    },
    async outputClosed(limitMs) {
      await within(Promise.all(copies.map((c) => c.closed)), limitMs);
      // Whatever still holds them open is not heard any more.
      for (const c of copies) c.from.destroy();
    },
    async outputFlushed(limitMs) {
      await within(Promise.all(copies.map((c) => c.flushed)), limitMs);
    },
  };
}

/**
 * The group stopped from here, for a guard that no longer answers: SIGTERM, the grace, SIGKILL.
 * A child that already exited is a zombie of the stopped guard and counts as gone.
 */
async function stopWithoutGuard(pid: number, graceMs: number): Promise<void> {
  signalGroup(pid, 'SIGTERM');
  const killAt = monoNow() + Math.max(0, graceMs);
  while (groupHasLiveMember(pid) && monoNow() < killAt) await sleep(Math.min(STOP_POLL_MS, killAt - monoNow()));
  signalGroup(pid, 'SIGKILL');
  const settleBy = monoNow() + KILL_SETTLE_MS;
  while (groupHasLiveMember(pid) && monoNow() < settleBy) await sleep(STOP_POLL_MS);
}

async function within(p: Promise<unknown>, limitMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([p, new Promise((resolve) => (timer = setTimeout(resolve, limitMs)))]);
  clearTimeout(timer);
}

/**
 * One of the child's streams copied on to ours (stdout or stderr), each chunk also kept in the
 * tail. Through process.stdout and process.stderr: on a pipe or socket they write without
 * blocking (a full one is polled by the event loop, so the renewals go on), and pipe() pauses
 * the child's side while ours is full (the child then blocks on its write, as it would with the
 * inherited descriptor). Ours is never ended: leasejob's own exit flushes and closes it.
 */
function copyOutput(
  from: Readable,
  fd: 1 | 2,
  tail: TailBuffer,
): { from: Readable; closed: Promise<void>; flushed: Promise<void> } {
  const to = fd === 1 ? process.stdout : process.stderr;
  // Ours gone (a reader that went away, a full disk): the child's output is still kept in the
  // tail and read to the end, so that the child never blocks on a pipe nobody reads.
  const onError = (): void => {
    from.unpipe(to);
    from.resume();
  };
  to.on('error', onError);
  const closed = new Promise<void>((resolve) => {
    from.once('close', resolve);
    from.once('error', () => resolve());
  });
  const flushed = closed.then(
    () =>
      new Promise<void>((resolve) => {
        to.off('error', onError);
        if (to.writableLength === 0 || to.destroyed) return resolve();
        to.once('drain', resolve);
        to.once('close', resolve);
      }),
  );
  from.on('data', (chunk: Buffer) => tail.push(chunk));
  from.pipe(to, { end: false });
  return { from, closed, flushed };
}

function toResult(exitCode: number | null, signal: NodeJS.Signals | null): ChildResult {
  if (signal !== null) return { exitCode, signal, code: 128 + (osConstants.signals[signal] ?? 0) };
  return { exitCode, signal, code: exitCode ?? 0 };
}

// ESRCH: the group is already empty, which is what we wanted.
function signalGroup(pgid: number, sig: NodeJS.Signals | 0): void {
  try {
    process.kill(-pgid, sig);
  } catch (error) {
    // EPERM: a member we may not signal (a setuid helper); the rest still gets the signal, and
    // failing here would turn a finished run into an internal error.
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'ESRCH' && code !== 'EPERM') throw error;
  }
}

/**
 * Whether any non-zombie process is still in the group. kill(-pgid, 0) alone counts zombies, and an
 * orphan's zombie lingers as long as PID 1 does not reap it (common in containers), so on Linux we
 * look at /proc; elsewhere we can only trust kill(), and a zombie costs at most the grace period.
 */
function groupHasLiveMember(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false;
    return true; // EPERM: someone is there, we just may not signal them
  }
  if (!procShowsOurNamespace()) return true;
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return true;
  }
  for (const name of entries) {
    if (!/^\d+$/.test(name)) continue;
    const stat = readProcStat(name);
    if (stat !== undefined && stat.pgrp === pgid && stat.state !== 'Z' && stat.state !== 'X') return true;
  }
  return false;
}

let procUsable: boolean | undefined;

// A /proc from another pid namespace (or none) would make every group look empty; check it names us.
function procShowsOurNamespace(): boolean {
  if (procUsable === undefined) {
    procUsable = process.platform === 'linux' && readProcStat(String(process.pid))?.pid === process.pid;
  }
  return procUsable;
}

function readProcStat(pid: string): { pid: number; state: string; pgrp: number } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined; // exited between readdir and read
  }
  // The command name may hold spaces and parentheses, so fields are counted from the last ')'.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const state = fields[0];
  const pgrp = Number(fields[2]);
  if (state === undefined || !Number.isInteger(pgrp)) return undefined;
  return { pid: Number.parseInt(text, 10), state, pgrp };
}

/** Throw SpawnError (127/126) unless `command` names an executable file, searching PATH like execvp. */
function resolveCommand(command: string, searchPath: string, cwd: string): void {
  if (command === '') throw new SpawnError('Expected a command to run, got an empty string.', 127);
  if (command.includes('/')) {
    const file = path.resolve(cwd, command);
    if (!exists(file)) throw new SpawnError(`Cannot run \`${command}\`: no such file.`, 127);
    if (!isExecutableFile(file)) throw new SpawnError(`Cannot run \`${command}\`: not an executable file.`, 126);
    return;
  }
  let deniedAt: string | undefined;
  for (const dir of searchPath.split(':')) {
    // An empty PATH entry means the current directory, as for execvp.
    const file = path.resolve(cwd, dir, command);
    if (isExecutableFile(file)) return;
    if (exists(file)) deniedAt ??= file;
  }
  // Like execvp: found somewhere but never executable is "permission denied", not "not found".
  if (deniedAt !== undefined)
    throw new SpawnError(`Cannot run \`${command}\`: \`${deniedAt}\` is not executable.`, 126);
  throw new SpawnError(`Cannot run \`${command}\`: not found on PATH.`, 127);
}

function exists(file: string): boolean {
  try {
    statSync(file);
    return true;
  } catch {
    return false;
  }
}

function isExecutableFile(file: string): boolean {
  try {
    if (!statSync(file).isFile()) return false;
    accessSync(file, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}
