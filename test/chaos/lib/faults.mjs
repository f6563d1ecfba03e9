// Fault kinds, the seeded schedule of a round, and the injectors that carry each one out.
import { readdirSync, readFileSync } from 'node:fs';
import { TTL_MS } from './fleet.mjs';
import { signalGroup, signalPid } from '../../helpers/signal.mjs';

/** Every kind, in report order; `needs` names the simulated host feature a kind depends on. */
export const FAULT_KINDS = [
  { kind: 'kill-runner', what: 'SIGKILL to a runner holding a lease (its child must die by parent-death signal)' },
  { kind: 'kill-group', what: "SIGKILL to a holder's process group and its child's group at once (a container kill)" },
  { kind: 'pause', what: 'SIGSTOP of a holder and its child for longer than the TTL, then SIGCONT' },
  {
    kind: 'kill-at-spawn',
    what: "SIGKILL to a runner at its child's spawn (the lease acquired, or the child first seen under its guard): no orphan",
  },
  {
    kind: 'stop-runner',
    what: 'SIGSTOP of a holder alone (a frozen event loop) for longer than the TTL, then SIGCONT: its child gone before the lease could be taken',
  },
  { kind: 'pg-restart', what: 'PostgreSQL restarted in immediate mode (a crash for every client)' },
  { kind: 'partition', what: "a host's route to the database cut (reset) or black-holed, then healed" },
  { kind: 'clock-skew-ahead', what: "a host's wall clock set minutes ahead", needs: 'clock' },
  { kind: 'clock-skew-behind', what: "a host's wall clock set minutes behind", needs: 'clock' },
  { kind: 'clock-jump-back', what: "a host's wall clock jumped back 5 minutes under a running holder", needs: 'clock' },
  {
    kind: 'contenders-50',
    what: '50 runners started at once on one fresh window, racing for a lease freed under them',
  },
  { kind: 'pgbouncer', what: 'a runner through PgBouncer in transaction mode', needs: 'bouncer' },
  {
    kind: 'failover',
    what: 'WAL shipping to the asynchronous standby stalled, the primary killed, the standby promoted and the address moved to it (--failover)',
    needs: 'failover',
  },
  {
    kind: 'failover-sequence',
    what: 'the same failover, aimed between two windows of an operator sequence (backfill, run --catch-up): fired as one window completes (--failover)',
    needs: 'failover',
  },
  {
    kind: 'restore-in-place',
    what: 'a base backup taken, the runners working on 1-4 s, the server crashed and the backup started in its place: same address, system identifier and timeline (--restore-in-place)',
    needs: 'restore',
  },
  {
    kind: 'db-clock-step',
    what: "the database server's wall clock stepped forward past the leases (2-4 TTLs) under the runners (--db-clock-step)",
    needs: 'db-clock',
  },
];

/** Faults that lose acknowledged history: what was committed from `at` to the crash is gone. */
export const LOSSY_KINDS = new Set(['failover', 'failover-sequence', 'restore-in-place']);

const CROWD = 50;
// How long an injector looks for a victim (a holder with its child at work) before giving up.
const VICTIM_SEARCH_MS = 12_000;
// How long the aimed failover waits for an operator sequence to complete one of its windows.
const SEQUENCE_SEARCH_MS = 30_000;

/**
 * The round's faults: each available kind once (so a bounded round covers them all), then
 * random extra ones, spread over the fault phase with jitter, with every parameter drawn now.
 */
export function planFaults({ rng, durationMs, available }) {
  const kinds = FAULT_KINDS.filter((k) => available.has(k.kind)).map((k) => k.kind);
  // One of each lossy fault per round: each costs a base backup (a new standby, or the one restored).
  const extraKinds = kinds.filter((k) => k !== 'contenders-50' && k !== 'pgbouncer' && !LOSSY_KINDS.has(k));
  const total = Math.max(kinds.length, Math.floor(durationMs / 5_000));
  const order = rng.shuffle(kinds);
  while (order.length < total) order.push(rng.pick(extraKinds));
  // Faults start after the first runners hold leases and end early enough to play out.
  const start = 4_000;
  const span = Math.max(durationMs - start - 10_000, order.length * 500);
  const slot = span / order.length;
  return order.map((kind, i) => ({
    kind,
    at: Math.round(start + i * slot + rng.float() * slot * 0.7),
    holdMs:
      kind === 'pause' || kind === 'stop-runner'
        ? TTL_MS + rng.int(700, 2_500)
        : kind === 'partition'
          ? rng.int(1_000, 6_000)
          : kind === 'restore-in-place'
            ? rng.int(1_000, 4_000)
            : undefined,
    mode:
      kind === 'partition'
        ? rng.pick(['reset', 'blackhole'])
        : kind === 'pause'
          ? rng.pick(['together', 'child-first'])
          : kind === 'kill-at-spawn'
            ? rng.pick(['acquired', 'child-seen'])
            : undefined,
    // Aimed: a short stall, so that the sequence's next claim meets the promoted standby.
    stallMs: kind === 'failover' ? rng.int(500, 2_000) : kind === 'failover-sequence' ? rng.int(100, 600) : undefined,
    stepS:
      kind === 'db-clock-step' ? rng.int(Math.ceil((2 * TTL_MS) / 1000), Math.ceil((4 * TTL_MS) / 1000)) : undefined,
    skewS:
      kind === 'clock-skew-ahead'
        ? rng.int(60, 600)
        : kind === 'clock-skew-behind'
          ? -rng.int(60, 600)
          : kind === 'clock-jump-back'
            ? -300
            : undefined,
  }));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const nextTurn = () => new Promise((r) => setImmediate(r));
// After a runner's SIGKILL its guard stops the child's group (SIGTERM, the 500 ms grace,
// SIGKILL, a 1 s settle) and exits: how long the injector waits before it looks for orphans.
const GUARD_GONE_MS = 5_000;

/** The direct children of `pid` (its main thread's, the one that spawns). */
function childrenOf(pid) {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Live processes whose environment names `owner`'s runner pid (LEASEJOB_OWNER host:pid:nonce): its children. */
function processesOfRunner(runnerPid) {
  const found = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const env = readFileSync(`/proc/${name}/environ`, 'latin1');
      if (!new RegExp(`(^|\0)LEASEJOB_OWNER=[^:\0]*:${runnerPid}:`).test(env)) continue;
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2)[0];
      if (state !== 'Z' && state !== 'X') found.push(Number(name));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return found;
}

/** `sig` to a pid, or to the group -target; false when it is gone (or refused: never pid 0, 1 or ours). */
function signal(target, sig) {
  try {
    return target < 0 ? signalGroup(-target, sig) : signalPid(target, sig);
  } catch {
    return false;
  }
}

export class Injector {
  constructor({ rng, fleet, hostsCtl, cluster, launchCrowd, launchVia, sequenceStep }) {
    Object.assign(this, { rng, fleet, hostsCtl, cluster, launchCrowd, launchVia, sequenceStep });
    this.done = [];
    this.inFlight = new Set();
    // A database restart and a 50-runner burst are kept apart: the burst's one-winner check
    // would otherwise measure the restart.
    this.exclusive = Promise.resolve();
  }

  fire(plan) {
    const p = this.inject(plan)
      .catch((err) => ({ ...plan, injected: false, note: `injector error: ${err.message}` }))
      .then((rec) => {
        this.done.push(rec);
        this.inFlight.delete(p);
        return rec;
      });
    this.inFlight.add(p);
    return p;
  }

  async settle() {
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }

  /** A holder whose child is at work: past its start-up, `minEffects` units attempted. */
  async findVictim(filter = () => true, minEffects = 0) {
    const until = Date.now() + VICTIM_SEARCH_MS;
    for (;;) {
      const candidates = this.fleet
        .holders((r) => filter(r) && Date.now() - r.child.startedAt > 300 && (r.child.effects ?? 0) >= minEffects)
        .sort((a, b) => a.id - b.id);
      if (candidates.length > 0) return this.rng.pick(candidates);
      if (Date.now() > until) return undefined;
      await sleep(200);
    }
  }

  /**
   * SIGKILL to a runner as its child starts: right after it logged 'lease acquired' (the child's
   * spawn comes next), or at the first sight of a process under its guard. Then, once the guard
   * has had time to stop the group, no process of that runner may be left.
   */
  async killAtSpawn(plan, rec) {
    const until = Date.now() + VICTIM_SEARCH_MS;
    let v;
    let seen;
    while (v === undefined && Date.now() < until) {
      const fresh = this.fleet.live(
        (r) => r.acquiredAt !== undefined && !r.child && r.faults.length === 0 && r.phase === 'chaos',
      );
      for (const r of fresh) {
        if (plan.mode === 'acquired') {
          v = r;
          break;
        }
        const guard = childrenOf(r.pid)[0];
        const child = guard === undefined ? undefined : childrenOf(guard)[0];
        if (child !== undefined) {
          v = r;
          seen = child;
          break;
        }
      }
      if (v === undefined) await (plan.mode === 'acquired' ? sleep(20) : nextTurn());
    }
    if (v === undefined) return { ...rec, injected: false, note: 'no runner caught at its spawn' };
    const at = Date.now();
    v.faults.push({ kind: 'kill-at-spawn', at });
    if (!signal(v.pid, 'SIGKILL')) {
      v.faults.pop();
      return { ...rec, injected: false, note: 'victim exited first' };
    }
    v.killedAt = at;
    await sleep(GUARD_GONE_MS);
    const orphans = processesOfRunner(v.pid);
    for (const pid of orphans) signal(pid, 'SIGKILL'); // the round goes on without them
    return {
      ...rec,
      at,
      run: v.id,
      job: v.job,
      window: v.window,
      generation: v.generation,
      host: v.host,
      childSeen: seen,
      orphans,
    };
  }

  async inject(plan) {
    const rec = { ...plan, startedAt: Date.now(), injected: true };
    const h = this.hostsCtl;
    switch (plan.kind) {
      case 'kill-runner':
      case 'kill-group': {
        const v = await this.findVictim();
        if (!v) return { ...rec, injected: false, note: 'no holder to kill' };
        const at = Date.now();
        const fault = { kind: plan.kind, at };
        v.faults.push(fault);
        const ok =
          plan.kind === 'kill-runner'
            ? signal(v.pid, 'SIGKILL')
            : signal(-v.pid, 'SIGKILL') && (signal(-v.child.pid, 'SIGKILL') || true);
        if (!ok) {
          v.faults.pop();
          return { ...rec, injected: false, note: 'victim exited first' };
        }
        v.killedAt = at;
        return { ...rec, at, run: v.id, job: v.job, window: v.window, generation: v.generation, host: v.host };
      }
      case 'kill-at-spawn':
        return await this.killAtSpawn(plan, rec);
      case 'stop-runner': {
        // SIGSTOP of the runner alone: its event loop frozen, its child running on. The guard
        // must stop the child at the lease's stop point (the run then looks like any lost lease).
        const v = await this.findVictim(undefined, 1);
        if (!v) return { ...rec, injected: false, note: 'no holder to stop' };
        const at = Date.now();
        v.faults.push({ kind: 'stop-runner', at });
        signal(v.pid, 'SIGSTOP');
        await sleep(plan.holdMs);
        signal(v.pid, 'SIGCONT');
        return {
          ...rec,
          at,
          resumedAt: Date.now(),
          run: v.id,
          job: v.job,
          window: v.window,
          generation: v.generation,
          host: v.host,
        };
      }
      case 'pause': {
        // A child paused while still starting may find its window finished by its successor when
        // it wakes: one already into its units goes straight for its next write.
        const v = await this.findVictim(undefined, 1);
        if (!v) return { ...rec, injected: false, note: 'no holder to pause' };
        const at = Date.now();
        const fault = { kind: 'pause', at };
        v.faults.push(fault);
        signal(v.pid, 'SIGSTOP');
        signal(-v.child.pid, 'SIGSTOP');
        v.pausedAt = at;
        await sleep(plan.holdMs);
        // --sabotage: always the child first, with time for a write, so that the broken child is
        // sure to be caught (the checker's own test).
        const sabotage = process.env.CHAOS_SABOTAGE !== undefined;
        if (plan.mode === 'child-first' || sabotage) {
          // The paused child wakes first and goes for its next write before its runner can react.
          signal(-v.child.pid, 'SIGCONT');
          await sleep(sabotage ? 600 : 150);
          signal(v.pid, 'SIGCONT');
        } else {
          signal(v.pid, 'SIGCONT');
          signal(-v.child.pid, 'SIGCONT');
        }
        v.resumedAt = Date.now();
        fault.resumedAt = v.resumedAt;
        return {
          ...rec,
          at,
          resumedAt: v.resumedAt,
          run: v.id,
          job: v.job,
          window: v.window,
          generation: v.generation,
          host: v.host,
        };
      }
      case 'pg-restart': {
        const release = await this.lock();
        try {
          const at = Date.now();
          await this.cluster.restart('immediate');
          return { ...rec, at, upAt: Date.now() };
        } finally {
          release();
        }
      }
      case 'failover':
      case 'failover-sequence':
        // Kept apart from restarts and the burst, as a restart is. Runners work on while WAL
        // shipping is stalled: what they commit then is lost with the primary. Aimed: between
        // two windows of a sequence, so that its next claim_window (or finish) carries a token
        // from before the failover; without a window completing in time, a plain failover.
        return this.alone(async () => {
          const aimed = plan.kind === 'failover-sequence';
          const step = aimed ? await this.sequenceStep(SEQUENCE_SEARCH_MS) : undefined;
          const v = aimed ? undefined : await this.findVictim(undefined, 1);
          const t = await this.cluster.failover({ stallMs: plan.stallMs });
          const note =
            aimed && !step ? `no sequence window completed within ${SEQUENCE_SEARCH_MS} ms: not aimed` : undefined;
          const times = { at: t.stalledAt, downAt: t.downAt, upAt: t.upAt, readyAt: t.readyAt };
          return { ...rec, ...times, holder: v?.id, aimed: step, note };
        });
      case 'restore-in-place':
        // Kept apart from restarts and the burst, as a failover is.
        return this.alone(async () => {
          const { backupAt, ...t } = await this.cluster.restoreInPlace({ holdMs: plan.holdMs });
          return { ...rec, at: backupAt, ...t };
        });
      case 'partition': {
        const proxied = h.hosts.filter((x) => x.proxy);
        const v = await this.findVictim((r) => proxied.some((x) => x.name === r.host));
        const host = v ? h.byName(v.host) : this.rng.pick(proxied);
        const at = Date.now();
        host.proxy.cut(plan.mode);
        await sleep(plan.holdMs);
        host.proxy.heal();
        const healedAt = Date.now();
        return { ...rec, at, healedAt, host: host.name, holder: v?.id };
      }
      case 'clock-skew-ahead':
      case 'clock-skew-behind': {
        const host = this.rng.pick(h.hosts.filter((x) => x.clockFile));
        const at = Date.now();
        h.setClock(host, plan.skewS);
        return { ...rec, at, host: host.name, offsetS: plan.skewS };
      }
      case 'clock-jump-back': {
        const clockHosts = h.hosts.filter((x) => x.clockFile);
        const v = await this.findVictim((r) => clockHosts.some((x) => x.name === r.host));
        const host = v ? h.byName(v.host) : this.rng.pick(clockHosts);
        const at = Date.now();
        const offsetS = host.clockOffsetS + plan.skewS;
        h.setClock(host, offsetS);
        return {
          ...rec,
          at,
          host: host.name,
          offsetS,
          holder: v?.id,
          note: v ? undefined : 'no holder on a faketime host: jumped an idle host',
        };
      }
      case 'db-clock-step': {
        // Aimed at a holder with its child at work: the database now counts its lease expired.
        const v = await this.findVictim(undefined, 1);
        const at = Date.now();
        this.cluster.dbClock.step(plan.stepS);
        return { ...rec, at, stepMs: plan.stepS * 1000, holder: v?.id, note: v ? undefined : 'no holder at work' };
      }
      case 'contenders-50': {
        const release = await this.lock();
        try {
          const at = Date.now();
          const [blocker, ...runs] = await this.launchCrowd(CROWD);
          // Held until the burst is over so that no restart lands in it.
          await Promise.all([blocker, ...runs].map((r) => r.exited));
          return {
            ...rec,
            at,
            job: runs[0].job,
            window: runs[0].window,
            blocker: blocker.id,
            runs: runs.map((r) => r.id),
            overAt: Date.now(),
          };
        } finally {
          release();
        }
      }
      case 'pgbouncer': {
        const run = this.launchVia('bouncer');
        return { ...rec, at: Date.now(), run: run.id, job: run.job, window: run.window };
      }
      default:
        throw new Error(`unknown fault ${plan.kind}`);
    }
  }

  /** fn() with no database restart, failover or 50-runner burst at the same time. */
  async alone(fn) {
    const release = await this.lock();
    try {
      return await fn();
    } finally {
      release();
    }
  }

  async lock() {
    const before = this.exclusive;
    let release;
    this.exclusive = new Promise((r) => (release = r));
    await before;
    return release;
  }
}
