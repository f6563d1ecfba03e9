// Runner processes: spawn real `leasejob run` CLIs on simulated hosts, follow their logs, and
// watch their children in /proc, every observation stamped with the harness clock.
import { spawn } from 'node:child_process';
import { procStat } from '../../helpers/proc.mjs';
import { BIN, WRITER } from './cluster.mjs';

// Short, so faults cross lease boundaries within seconds; the grace must leave a renewal room
// inside the TTL (leasejob refuses otherwise): stop at TTL - grace - min(1s, TTL/10) = 2.2 s.
const TTL = '3s';
export const TTL_MS = 3_000;
const KILL_GRACE = '500ms';
// Waiting contenders give up after this: bounds a round even when a window cannot be had.
const WAIT_TIMEOUT = '20s';
// /proc is read this often for children that are still alive: the resolution of an end time
// observed by the harness (a child's own stamp is exact).
const CHILD_POLL_MS = 50;

const SCRUBBED_ENV = /^(DATABASE_URL|LEASEJOB_|PG[A-Z]+$|LD_PRELOAD$|FAKETIME)/; // CHAOS_SABOTAGE passes through

/** The window a run targets: literal keys for some jobs, scheduled occurrences for the others. */
export function windowOf(job, index) {
  if (job.mode === 'literal')
    return { key: `w${String(index).padStart(3, '0')}`, args: ['--window', `w${String(index).padStart(3, '0')}`] };
  const at = new Date(Date.UTC(2021, 0, 1) + index * 3_600_000); // past occurrences: a future one is refused
  return {
    key: at.toISOString().slice(0, 13),
    args: [
      '--schedule',
      '0 * * * *',
      '--window-from-schedule',
      '--scheduled-time',
      at.toISOString(),
      '--window-format',
      "yyyy-MM-dd'T'HH",
    ],
  };
}

export class Fleet {
  constructor({ cluster, effectsFile }) {
    this.cluster = cluster;
    this.effectsFile = effectsFile;
    this.runs = [];
    this.seq = 0;
    this.poller = setInterval(() => this.pollChildren(), CHILD_POLL_MS);
    this.poller.unref();
  }

  /**
   * @param {{ job: {name: string, mode: string}, windowIndex: number, host: object, onBusy: 'skip'|'wait'|'replace',
   *           units: number, delayMs: number, phase: string, nice?: boolean, waitTimeout?: string,
   *           maxAttempts?: number }} o
   */
  launch(o) {
    if (this.closed) throw new Error('the harness is stopping: no more runners');
    const win = windowOf(o.job, o.windowIndex);
    const args = [
      BIN,
      'run',
      '--name',
      o.job.name,
      ...win.args,
      '--ttl',
      TTL,
      '--kill-grace',
      KILL_GRACE,
      '--database-url',
      o.host.url,
      '--schema',
      this.cluster.schema,
      '--pass-database-url',
      '--on-busy',
      o.onBusy,
      ...(o.onBusy === 'wait' || o.onBusy === 'replace' ? ['--wait-timeout', o.waitTimeout ?? WAIT_TIMEOUT] : []),
      // An attempt budget for the job (issue 17): the checker holds it as the invariant `budget`.
      // Without one, every trigger may run a failed window again, as the checks expect (the clean
      // reruns complete what the faults left): --max-attempts 1000, not run's default of once
      // per occurrence for a scheduled one.
      ...['--max-attempts', String(o.maxAttempts ?? 1000)],
      '--',
      process.execPath,
      WRITER,
      '--units',
      String(o.units),
      '--delay-ms',
      String(o.delayMs),
      '--effects',
      this.effectsFile,
    ];
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !SCRUBBED_ENV.test(k)));
    Object.assign(env, o.host.env, { CHAOS_OBSERVER_URL: this.cluster.directUrl, LEASEJOB_LOG_LEVEL: 'info' });
    // Contenders of the 50-runner burst run niced: the burst is meant to load the lease row and
    // the database, not to starve the other runners' timers on a 2-core machine.
    const [file, argv] = o.nice ? ['nice', ['-n', '10', process.execPath, ...args]] : [process.execPath, args];
    // detached: the runner leads its own process group, so a fault can SIGKILL the group.
    const proc = spawn(file, argv, { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const run = {
      id: ++this.seq,
      job: o.job.name,
      windowIndex: o.windowIndex,
      window: win.key,
      host: o.host.name,
      realClock: !o.host.clockFile,
      onBusy: o.onBusy,
      phase: o.phase,
      units: o.units,
      maxAttempts: o.maxAttempts,
      attempt: undefined,
      pid: proc.pid,
      startedAt: Date.now(),
      exitedAt: undefined,
      code: undefined,
      signal: undefined,
      lines: [],
      stderr: '',
      generation: undefined,
      acquiredAt: undefined,
      child: undefined,
      lostAt: undefined,
      lossReason: undefined,
      faults: [],
    };
    run.exited = new Promise((resolve) => {
      proc.once('exit', (code, signal) => {
        run.exitedAt = Date.now();
        run.code = code;
        run.signal = signal;
        resolve(run);
      });
      proc.once('error', (err) => {
        run.exitedAt = Date.now();
        run.code = -1;
        run.stderr += `spawn error: ${err.message}\n`;
        resolve(run);
      });
    });
    let pending = '';
    proc.stderr.on('data', (chunk) => {
      const t = Date.now();
      pending += chunk;
      let nl;
      while ((nl = pending.indexOf('\n')) >= 0) {
        this.onLine(run, pending.slice(0, nl), t);
        pending = pending.slice(nl + 1);
      }
    });
    proc.stdout.resume();
    this.runs.push(run);
    return run;
  }

  onLine(run, line, t) {
    if (run.stderr.length < 200_000) run.stderr += `${line}\n`;
    if (line.startsWith('chaos-writer {"kind":"effect"') && run.child) run.child.effects = (run.child.effects ?? 0) + 1;
    if (!line.startsWith('{')) return;
    let rec;
    try {
      rec = JSON.parse(line);
    } catch {
      return;
    }
    // When it was logged: the runner's own timestamp where its wall clock is the real one (exact
    // to the millisecond), else when the line reached us (a pipe and an event loop later).
    const at = run.realClock && typeof rec.time === 'string' ? Math.min(Date.parse(rec.time), t) : t;
    run.lines.push({ t: at, msg: rec.msg, rec });
    switch (rec.msg) {
      case 'lease acquired':
        run.generation = String(rec.generation);
        run.acquiredAt = at;
        run.attempt = rec.attempt;
        break;
      case 'child started': {
        const st = procStat(rec.childPid);
        run.child = { pid: rec.childPid, startedAt: at, starttime: st?.starttime, goneAt: st ? undefined : t };
        break;
      }
      case 'released the lease of an acquire whose answer was lost':
        // Its acquire committed unanswered, then it gave that generation back (and exits 69).
        run.abandoned = String(rec.generation);
        break;
      case 'lease lost':
        run.lostAt ??= at;
        run.lossReason ??= rec.reason;
        break;
      case 'lease was no longer held at finish; outcome not recorded':
        // The loss found at the finish: the database's clock stepped past the lease before any
        // renewal could see it, and the child ended by itself (its fenced write refused).
        run.lostAtFinish ??= at;
        break;
      case 'child exited':
        if (run.child) {
          run.child.exitedLineAt = at;
          // The runner's monotonic time from spawn to reap: with `startedAt`, a bound on the end
          // that no wall clock (a faked one) and no late delivery of this line can move.
          run.child.durationMs = typeof rec.durationMs === 'number' ? rec.durationMs : undefined;
          run.child.exitCode = rec.exitCode;
          run.child.signal = rec.signal;
          run.child.goneAt ??= t;
        }
        break;
      default:
    }
  }

  pollChildren() {
    const now = Date.now();
    for (const run of this.runs) {
      const c = run.child;
      if (!c || c.goneAt !== undefined) continue;
      const st = procStat(c.pid);
      if (!st || st.state === 'Z' || st.state === 'X' || st.starttime !== c.starttime) c.goneAt = now;
    }
  }

  live(filter = () => true) {
    return this.runs.filter((r) => r.exitedAt === undefined && filter(r));
  }

  /** Runs holding a lease with their child at work, that no fault has touched yet. */
  holders(filter = () => true) {
    return this.live(
      (r) =>
        r.child &&
        r.child.goneAt === undefined &&
        r.lostAt === undefined &&
        r.faults.length === 0 &&
        r.phase === 'chaos' &&
        filter(r),
    );
  }

  async waitAll(timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const live = this.live();
      if (live.length === 0) return [];
      if (Date.now() > deadline) return live;
      await Promise.race([Promise.all(live.map((r) => r.exited)), new Promise((r) => setTimeout(r, 250))]);
    }
  }

  stop() {
    clearInterval(this.poller);
  }
}
