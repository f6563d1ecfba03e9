// The Node guard: the fallback twin of the native guard (src/native/guard.c), used where no
// native one is shipped for the platform (or LEASEJOB_NATIVE_GUARD=off). A small process between
// leasejob and the child that stops the child's process group when leasejob is gone (its end of
// the control socket closed, however it died) or when the lease's stop point leasejob last sent
// has passed, whatever happens to leasejob's event loop meanwhile. Node built-ins only: it is
// started for every child (dist/guard.cjs, or the single file started with LEASEJOB_GUARD=1), so
// it must load nothing else. It speaks the line protocol of guard-protocol.ts on fd 3.
//
// What it cannot do that the native one does: become a child subreaper (a process that left the
// child's group with setsid is out of its reach), arm the child's parent-death signal (setpriv
// --pdeathsig does, where present), or read CLOCK_BOOTTIME directly (boot-clock.ts).
import { spawn } from 'node:child_process';
import { Socket } from 'node:net';
import { constants } from 'node:os';
import { bootClock, bootStopAt } from './boot-clock.js';
import { CONTROL_FD, lineReader, type GuardStart } from './guard-protocol.js';

// How often the guard looks whether the group is empty once it has been told to stop it.
const GONE_POLL_MS = 50;
// After SIGKILL, how long the guard waits for the group to go before it exits anyway (a member
// in uninterruptible I/O takes SIGKILL when it next leaves the kernel).
const KILL_SETTLE_MS = 1_000;
// The longest a timer waits before the boot clock is read again: Node's timers run on the
// monotonic clock, which a suspend stops, so a resumed machine is noticed within this.
const LOOK_AGAIN_MS = 1_000;
// Signals sent to the guard itself (not to leasejob's group: it has a session of its own) are the
// child's: passed on to its group, as leasejob passes on the ones it gets.
const FORWARDED: NodeJS.Signals[] = ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'];
// Exit codes of the guard itself when there is no child's to pass on.
const EXIT_PARENT_GONE = 1;
const EXIT_PROTOCOL = 70;

const monoNow = (): number => {
  const [s, ns] = process.hrtime();
  return s * 1e3 + ns / 1e6;
};
const bootNow = bootClock(monoNow);

function signalGroup(pgid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, sig);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** A percent-encoded value (bytes read as latin1) as the UTF-8 text it encodes. */
const decodeValue = (v: string): string =>
  Buffer.from(
    v.replace(/%([0-9A-Fa-f]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))),
    'latin1',
  ).toString('utf8');

/** The start as the lines before `start` said it; undefined while it is not complete. */
interface Pending {
  file?: string;
  args: string[];
  env: Record<string, string>;
  cwd?: string;
  uid?: number;
  gid?: number;
  graceMs: number;
  stopAtBoot: number;
}

/** One line of the start (before `start`) into `pending`; false when it is not one. */
function applyStartLine(pending: Pending, keyword: string, value: string | undefined): boolean {
  if (value === undefined) return false;
  if (/%(?![0-9A-Fa-f]{2})/.test(value)) return false;
  const text = decodeValue(value);
  if (text.includes('\0')) return false;
  if (keyword === 'file' && pending.file === undefined) pending.file = text;
  else if (keyword === 'arg') pending.args.push(text);
  else if (keyword === 'env' && text.indexOf('=') > 0) {
    const eq = text.indexOf('=');
    pending.env[text.slice(0, eq)] = text.slice(eq + 1);
  } else if (keyword === 'cwd' && pending.cwd === undefined) pending.cwd = text;
  else if (keyword === 'grace' && /^\d{1,15}$/.test(value)) pending.graceMs = Number(value);
  else if (keyword === 'user' && /^\d{1,10} \d{1,10}$/.test(value))
    [pending.uid, pending.gid] = value.split(' ').map(Number);
  else return false;
  return true;
}

/** The guard's whole life: read the start, run the child, watch the socket and the deadline. */
export function runGuard(): void {
  const guard = new NodeGuard(new Socket({ fd: CONTROL_FD, readable: true, writable: true }));
  for (const sig of FORWARDED) process.on(sig, () => guard.forward(sig));
}

class NodeGuard {
  private pgid: number | undefined;
  private exitCode: number | undefined;
  private parentGone = false;
  private released = false;
  private started = false;
  private stopAt = Infinity; // boot clock ms
  private killAt = Infinity;
  private graceMs = 0;
  private termSent = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly pending: Pending = { args: [], env: {}, graceMs: 0, stopAtBoot: Infinity };

  constructor(private readonly control: Socket) {
    const gone = (): void => this.onParentGone();
    control.setEncoding('latin1');
    control.on(
      'data',
      lineReader((line) => this.onLine(line)),
    );
    control.on('end', gone);
    control.on('close', gone);
    control.on('error', gone);
  }

  forward(sig: NodeJS.Signals): void {
    if (this.pgid !== undefined && this.exitCode === undefined) signalGroup(this.pgid, sig);
  }

  private send(line: string): void {
    if (!this.parentGone && this.control.writable) this.control.write(`${line}\n`, () => {});
  }

  private finish(code: number): void {
    clearTimeout(this.timer);
    // What we said must reach leasejob before we go; a socket already closed cannot hold us.
    if (this.parentGone || !this.control.writable) process.exit(code);
    this.control.end(() => process.exit(code));
  }

  private groupGone(): boolean {
    return this.pgid === undefined || !signalGroup(this.pgid, 0);
  }

  /**
   * Nothing left to guard: the child reaped and given back by leasejob (`done`), or, once
   * stopping (the stop point, leasejob gone), its group empty. The guard's own end so comes
   * after leasejob is done with it, never racing its last line.
   */
  private maybeFinish(): void {
    if (this.exitCode === undefined) return;
    if (this.released) return this.finish(this.exitCode);
    const stopping = this.termSent || this.parentGone;
    if (stopping && (this.groupGone() || bootNow() >= this.killAt + KILL_SETTLE_MS)) this.finish(this.exitCode);
  }

  private tick(): void {
    clearTimeout(this.timer);
    const now = bootNow();
    const { pgid } = this;
    const groupLeft = this.exitCode === undefined || !this.groupGone();
    if (pgid !== undefined && now >= this.stopAt && !this.termSent && !this.released && groupLeft) {
      this.termSent = true;
      this.killAt = Math.min(this.killAt, this.stopAt + this.graceMs);
      this.send('deadline');
      signalGroup(pgid, 'SIGTERM');
    }
    if (pgid !== undefined && now >= this.killAt && !this.released) signalGroup(pgid, 'SIGKILL');
    this.maybeFinish();
    const next = this.termSent ? Math.min(this.killAt, now + GONE_POLL_MS) : this.stopAt;
    if (next !== Infinity)
      this.timer = setTimeout(() => this.tick(), Math.min(LOOK_AGAIN_MS, Math.max(0, next - bootNow())));
  }

  // leasejob is gone (exited, killed, even before it could send anything): the child's group is
  // stopped with the grace, never left to run unsupervised. A child not started yet never starts.
  private onParentGone(): void {
    if (this.parentGone) return;
    this.parentGone = true;
    if (this.released) return this.maybeFinish();
    if (this.pgid === undefined) return process.exit(this.exitCode ?? EXIT_PARENT_GONE);
    this.stopAt = Math.min(this.stopAt, bootNow());
    this.tick();
  }

  private startChild(start: GuardStart): void {
    this.graceMs = start.graceMs;
    // Past the stop point (leasejob stopped or starved between its own check and this start):
    // the lease may already be another's, so the command never starts. ETIME tells leasejob why.
    if (bootNow() >= this.stopAt) {
      this.send('spawn-error ETIME');
      return this.finish(127);
    }
    const c = spawn(start.file, start.args, {
      env: start.env,
      cwd: start.cwd,
      ...(start.uid !== undefined ? { uid: start.uid, gid: start.gid } : {}),
      stdio: 'inherit', // the child's output is the user's: our descriptors, untouched
      detached: true, // its own process group and session, so one signal reaches all it starts
    });
    c.once('error', (err: NodeJS.ErrnoException) => {
      if (this.pgid !== undefined) return;
      this.send(`spawn-error ${/^E[A-Z0-9]+$/.test(err.code ?? '') ? err.code : 'EUNKNOWN'}`);
      this.finish(127);
    });
    // Known as spawn() returns (the fork is done): from here on the group is ours to stop.
    if (c.pid !== undefined) {
      this.pgid = c.pid;
      this.send(`pid ${c.pid}`);
      this.tick();
    }
    c.once('exit', (code, signal) => {
      const signo = signal !== null ? (constants.signals[signal] ?? 0) : undefined;
      this.exitCode = signo !== undefined ? 128 + signo : (code ?? 0);
      this.send(signo !== undefined ? `signal ${signo}` : `exit ${this.exitCode}`);
      this.tick();
    });
  }

  private onLine(line: string): void {
    if (this.understood(line)) return;
    this.send('error protocol');
    // A leasejob that says what we cannot read is treated as one gone: nothing unguarded.
    if (this.pgid === undefined && !this.started) return this.finish(EXIT_PROTOCOL);
    this.control.destroy();
    this.onParentGone();
  }

  /** A line leasejob sent, acted on; false when it is not one the protocol allows here. */
  private understood(line: string): boolean {
    const space = line.indexOf(' ');
    const keyword = space < 0 ? line : line.slice(0, space);
    const value = space < 0 ? undefined : line.slice(space + 1);
    const whole = value !== undefined && /^\d{1,18}$/.test(value) ? Number(value) : undefined;
    if (keyword === 'ping' && whole !== undefined) this.send(`pong ${whole}`);
    else if (keyword === 'stop' && (value === '-' || whole !== undefined)) {
      const at = whole === undefined ? Infinity : bootStopAt(whole, monoNow(), bootNow());
      if (!this.started) this.pending.stopAtBoot = at;
      else {
        this.stopAt = at;
        this.tick();
      }
    } else if (keyword === 'done' && value === undefined && this.started) {
      this.released = true;
      this.maybeFinish();
    } else if (this.started) return false;
    else if (keyword !== 'start') return applyStartLine(this.pending, keyword, value);
    else return this.start(value);
    return true;
  }

  private start(value: string | undefined): boolean {
    if (value !== undefined || this.pending.file === undefined) return false;
    this.started = true;
    this.stopAt = this.pending.stopAtBoot;
    const { file, args, env, cwd, uid, gid, graceMs } = this.pending;
    // Read with the socket's end in the same chunk: leasejob died right after sending it.
    setImmediate(() =>
      this.parentGone
        ? process.exit(EXIT_PARENT_GONE)
        : this.startChild({ file, args, env, cwd: cwd ?? process.cwd(), uid, gid, graceMs, stopAtMs: null }),
    );
    return true;
  }
}
