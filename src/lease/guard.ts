// The guard: a small process between leasejob and the child that stops the child's process group
// when leasejob is gone (its end of the control socket closed, however it died) or when the lease
// deadline leasejob last sent has passed, whatever happens to leasejob's event loop meanwhile.
// Node built-ins only: it is started for every child (dist/guard.cjs, or the single file started
// with LEASEJOB_GUARD=1), so it must load nothing else.
//
// The control socket (guard-protocol.ts) is the guard's fd 3, newline-delimited JSON both ways:
//   leasejob -> guard  {start: GuardStart}  once, first; {stopAtMs} after each renewal; {done: true}
//   guard -> leasejob  {pid} or {spawnError, errno}; {exit, signal}; {deadline: true} when it stopped the child
// Times are milliseconds on CLOCK_MONOTONIC (process.hrtime), one clock for every process of
// the host, so leasejob's deadline means the same instant here.
import { spawn } from 'node:child_process';
import { Socket } from 'node:net';
import { constants } from 'node:os';
import { CONTROL_FD, type FromGuard, type GuardStart, type ToGuard } from './guard-protocol.js';

// How often the guard looks whether the group is empty once it has been told to stop it.
const GONE_POLL_MS = 50;
// After SIGKILL, how long the guard waits for the group to go before it exits anyway (a member
// in uninterruptible I/O takes SIGKILL when it next leaves the kernel).
const KILL_SETTLE_MS = 1_000;
// setTimeout's largest delay (2^31 - 1 ms, about 24.8 days).
const MAX_TIMER_MS = 2 ** 31 - 1;
// Signals sent to the guard itself (not to leasejob's group: it has a session of its own) are the
// child's: passed on to its group, as leasejob passes on the ones it gets.
const FORWARDED: NodeJS.Signals[] = ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'];

const monoNow = (): number => {
  const [s, ns] = process.hrtime();
  return s * 1e3 + ns / 1e6;
};

function signalGroup(pgid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, sig);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The guard's whole life: read the start, run the child, watch the socket and the deadline. */
export function runGuard(): void {
  const control = new Socket({ fd: CONTROL_FD, readable: true, writable: true });
  let pgid: number | undefined;
  let exitCode: number | undefined;
  let parentGone = false;
  let released = false;
  let stopAtMs = Infinity;
  let killAtMs = Infinity;
  let graceMs = 0;
  let termSent = false;
  let timer: NodeJS.Timeout | undefined;

  const send = (m: FromGuard): void => {
    if (!parentGone && control.writable) control.write(`${JSON.stringify(m)}\n`, () => {});
  };
  const finish = (code: number): void => {
    clearTimeout(timer);
    // What we said must reach leasejob before we go; a socket already closed cannot hold us.
    if (parentGone || !control.writable) process.exit(code);
    control.end(() => process.exit(code));
  };
  const groupGone = (): boolean => pgid === undefined || !signalGroup(pgid, 0);

  /** Nothing left to guard: the child reaped, and its group empty or given back to leasejob. */
  const maybeFinish = (): void => {
    if (exitCode === undefined) return;
    if (released || groupGone() || monoNow() >= killAtMs + KILL_SETTLE_MS) finish(exitCode);
  };

  const tick = (): void => {
    clearTimeout(timer);
    const now = monoNow();
    if (pgid !== undefined && now >= stopAtMs && !termSent && !released) {
      termSent = true;
      killAtMs = Math.min(killAtMs, stopAtMs + graceMs);
      if (!parentGone) send({ deadline: true });
      signalGroup(pgid, 'SIGTERM');
    }
    if (pgid !== undefined && now >= killAtMs && !released) signalGroup(pgid, 'SIGKILL');
    maybeFinish();
    const next = termSent ? Math.min(killAtMs, now + GONE_POLL_MS) : stopAtMs;
    // Node fires a longer timer at once: a far deadline (a TTL of weeks) is looked at again then.
    if (next !== Infinity) timer = setTimeout(tick, Math.min(MAX_TIMER_MS, Math.max(0, next - monoNow())));
  };

  // leasejob is gone (exited, killed, even before it could send anything): the child's group is
  // stopped with the grace, never left to run unsupervised. A child not started yet never starts.
  const onParentGone = (): void => {
    if (parentGone) return;
    parentGone = true;
    if (released) return maybeFinish();
    if (pgid === undefined) return process.exit(exitCode ?? 1);
    stopAtMs = Math.min(stopAtMs, monoNow());
    tick();
  };

  const startChild = (start: GuardStart): void => {
    graceMs = start.graceMs;
    stopAtMs = start.stopAtMs ?? Infinity;
    const c = spawn(start.file, start.args, {
      env: start.env,
      cwd: start.cwd,
      ...(start.uid !== undefined ? { uid: start.uid, gid: start.gid } : {}),
      stdio: 'inherit', // the child's output is the user's: our descriptors, untouched
      detached: true, // its own process group and session, so one signal reaches all it starts
    });
    c.once('error', (err: NodeJS.ErrnoException) => {
      if (pgid !== undefined) return;
      send({ spawnError: err.message, errno: err.code });
      finish(127);
    });
    // Known as spawn() returns (the fork is done): from here on the group is ours to stop.
    if (c.pid !== undefined) {
      pgid = c.pid;
      send({ pid: c.pid });
      tick();
    }
    c.once('exit', (code, signal) => {
      exitCode = signal !== null ? 128 + (constants.signals[signal] ?? 0) : (code ?? 0);
      send({ exit: code, signal });
      tick();
    });
  };

  let buffered = '';
  const onMessage = (m: ToGuard): void => {
    if ('start' in m) {
      // Read with the socket's end in the same chunk: leasejob died right after sending it.
      setImmediate(() => (parentGone ? process.exit(1) : startChild(m.start)));
    } else if ('stopAtMs' in m) {
      stopAtMs = m.stopAtMs ?? Infinity;
      tick();
    } else if ('done' in m) {
      released = true;
      maybeFinish();
    }
  };
  control.setEncoding('utf8');
  control.on('data', (chunk: string) => {
    buffered += chunk;
    for (let i = buffered.indexOf('\n'); i >= 0; i = buffered.indexOf('\n')) {
      const line = buffered.slice(0, i);
      buffered = buffered.slice(i + 1);
      onMessage(JSON.parse(line) as ToGuard);
    }
  });
  control.on('end', onParentGone);
  control.on('close', onParentGone);
  control.on('error', onParentGone);
  for (const sig of FORWARDED)
    process.on(sig, () => {
      if (pgid !== undefined && exitCode === undefined) signalGroup(pgid, sig);
    });
}
