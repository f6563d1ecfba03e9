// The invariants checked after each round, from the database (events, leases, windows, the
// protected table with real commit timestamps), the children's effects log and what the
// harness saw (exit codes, log lines, /proc, fault times). Each violation is one precise line.
//
// Clocks: the harness stamps its observations with its own wall clock, which is the database
// clock (same kernel, no faketime in the harness; the offset is measured at start and applied).

import { LOSSY_KINDS } from './faults.mjs';
import { TTL_MS } from './fleet.mjs';

// Resolution of an end time: /proc is polled every 50 ms, log lines and stamps arrive through
// pipes and a busy event loop. Generous, as a 2-core machine shared with other work needs.
const END_SLACK_MS = 500;
// A child whose runner was SIGKILLed dies by PR_SET_PDEATHSIG at once; the harness sees it in
// /proc within a poll, unless its own event loop is busy (spawning the 50 contenders).
const PDEATH_SLACK_MS = 2_000;
// ... and it attempts nothing after the kill: an effect this long after it means it lived on.
const PDEATH_EFFECT_SLACK_MS = 250;
// After SIGCONT the runner's overdue deadline fires at once and stops the child with no grace
// left (SIGTERM then SIGKILL); `child-first` resumes the runner 150 ms after the child.
const RESUME_SLACK_MS = 1_500;

// Runner log lines that explain an exit 75 besides `lease lost`.
const LOSS_MESSAGES = new Set([
  'lease was no longer held at finish; outcome not recorded',
  'lease acquired too late to start safely',
  // --on-busy replace: a later occurrence asked this holder to stop (the lease kept until released).
  'replaced by a later occurrence; stopping the command',
]);

// A token is epoch * 10^12 + n (sql/011_failover_fencing.sql): n counts acquisitions, the epoch
// advances at a failover.
const EPOCH = 1_000_000_000_000n;

/** The SIGKILL a run's runner got from the harness, if any. */
const killedBy = (r) =>
  r.faults.find((f) => f.kind === 'kill-runner' || f.kind === 'kill-group' || f.kind === 'kill-at-spawn');

const k2 = (a, b) => `${a}\u0000${b}`;
const iso = (t) => (t === undefined || t === null ? 'never' : new Date(t).toISOString());
const ms = (t) =>
  t === undefined || t === null
    ? undefined
    : t instanceof Date
      ? t.getTime()
      : typeof t === 'string'
        ? Date.parse(t)
        : t;

export async function loadRound(pool, schema, jobs) {
  const s = `"${schema}"`;
  const q = async (text) => (await pool.query(text, [jobs])).rows;
  return {
    events:
      await q(`SELECT job, seq::int AS seq, kind, window_key, owner, generation::text AS generation, db_time, detail,
                            pg_xact_commit_timestamp(xmin) AS committed_at
                       FROM ${s}.events WHERE job = ANY($1) ORDER BY job, seq`),
    leases: await q(
      `SELECT name, owner, generation::text AS generation, expires_at, released_at FROM ${s}.leases WHERE name = ANY($1)`,
    ),
    windows: await q(
      `SELECT job, window_key, generation::text AS generation, attempts, outcome, completed_at FROM ${s}.windows WHERE job = ANY($1)`,
    ),
    units:
      await q(`SELECT job, window_key, unit, generation::text AS generation, written_at, pg_xact_commit_timestamp(xmin) AS committed_at
                      FROM ${s}.chaos_units WHERE job = ANY($1)`),
    childEnds: await q(`SELECT job, window_key, generation::text AS generation, pid, reason, exit_code, ended_at
                          FROM ${s}.chaos_child_ends WHERE job = ANY($1)`),
  };
}

/** Per job: acquisitions by generation, releases, successors, claims; from the event log. */
function indexEvents(events) {
  const byJob = new Map();
  for (const e of events) {
    let j = byJob.get(e.job);
    if (!j)
      byJob.set(
        e.job,
        (j = {
          events: [],
          acq: new Map(),
          released: new Map(),
          successorOf: new Map(),
          claims: new Map(),
          completed: new Map(),
        }),
      );
    j.events.push(e);
    if (e.kind === 'acquired' || e.kind === 'stale-takeover') j.acq.set(e.generation, e);
    if (e.kind === 'stale-takeover' && e.detail?.previous_generation !== undefined)
      j.successorOf.set(String(e.detail.previous_generation), e);
    if (e.kind === 'released') j.released.set(e.generation, e);
    if (e.kind === 'window-claimed') j.claims.set(e.generation, e);
    if (e.kind === 'window-completed') j.completed.set(e.generation, e);
  }
  for (const j of byJob.values())
    j.gens = [...j.acq.keys()]
      .map(BigInt)
      .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
      .map(String);
  return byJob;
}

/** The acquisition of the first generation after g, if any. */
function nextAcquisition(j, g) {
  const i = j.gens.indexOf(g);
  return i >= 0 && i + 1 < j.gens.length ? j.acq.get(j.gens[i + 1]) : undefined;
}

export function checkRound({ data, runs, faults, jobs, unitsOf, crowdWindows, stragglers, clockOffsetMs, effects }) {
  const inv = new Map();
  const violate = (name, msg) => inv.get(name).push(msg);
  for (const name of [
    'fencing',
    'exactly-once',
    'completion',
    'generations',
    'child-lifetime',
    'one-live-child',
    'exit-codes',
    'contenders',
    'budget',
    'replace',
  ])
    inv.set(name, []);
  const figures = { takeoverMs: [], lossToStopMs: [], pdeathMs: [], marginMs: [], effects: {} };
  // harness clock -> database clock, with the database clock's own steps (db-clock-step) so far
  const steps = faults.filter((f) => f.kind === 'db-clock-step' && f.injected);
  const stepsBy = (t) => steps.reduce((sum, f) => sum + (f.at <= t ? f.stepMs : 0), 0);
  const db = (t) => (t === undefined ? undefined : t + clockOffsetMs + stepsBy(t));
  const ev = indexEvents(data.events);
  const J = (job) =>
    ev.get(job) ?? {
      events: [],
      acq: new Map(),
      released: new Map(),
      successorOf: new Map(),
      claims: new Map(),
      completed: new Map(),
      gens: [],
    };
  // A failover to an asynchronous standby (--failover) loses what the standby had not received:
  // acquisitions (the generation is then unknown to the new primary), renewals (its lease ends
  // earlier there than its runner believes) and completions. A run alive across one is judged
  // by the fence (no unit of it committed out of turn, above and below) and by its child ending
  // within a TTL of the promotion when its generation was lost, not by the rules that assume
  // the database kept every commit it acknowledged.
  // A backup restored in place (--restore-in-place) loses the same things, everything committed
  // after the backup (`at` is when it began), and is judged the same way. Every table the
  // checks read (events and their copies, windows, chaos_units, child ends) is in the restored
  // database, so what it forgot is forgotten consistently: a window whose completion was lost
  // and that ran again completes once in what survives, and the database-side rules (fencing,
  // exactly-once, completes-once, ...) judge the surviving history as they judge any other.
  const failovers = faults.filter((f) => LOSSY_KINDS.has(f.kind) && f.injected);
  const acrossFailover = (r) =>
    failovers.find((f) => r.startedAt <= (f.upAt ?? f.at) && (r.exitedAt ?? Infinity) >= f.at);
  const lostGeneration = (r) => failovers.length > 0 && r.generation !== undefined && !J(r.job).acq.has(r.generation);

  // --- fencing: no unit committed by a generation after the lease had moved on. -------------
  // Exact rule, on commit timestamps (track_commit_timestamp), not on events.db_time: db_time is
  // now(), the *start* of the acquiring transaction, and an acquisition that waited on a fenced
  // transaction's FOR SHARE lock starts before that transaction commits; the lock orders them,
  // so the meaningful order is the commit order. A unit written by generation g must commit
  // after g's acquisition committed, before g+1's acquisition committed, and before g's release.
  for (const u of data.units) {
    const j = J(u.job);
    const c = ms(u.committed_at);
    const where = `${u.job} ${u.window_key} unit ${u.unit}`;
    const acq = j.acq.get(u.generation);
    if (c === undefined) {
      violate('fencing', `${where}: no commit timestamp (track_commit_timestamp off?)`);
      continue;
    }
    if (!acq) {
      violate('fencing', `${where}: written by generation ${u.generation}, which was never acquired`);
      continue;
    }
    if (c < ms(acq.committed_at))
      violate(
        'fencing',
        `${where}: committed at ${iso(c)}, before its generation ${u.generation} was acquired (${iso(ms(acq.committed_at))})`,
      );
    const next = nextAcquisition(j, u.generation);
    if (next && c > ms(next.committed_at)) {
      violate(
        'fencing',
        `${where}: committed at ${iso(c)} by generation ${u.generation}, ${c - ms(next.committed_at)} ms after generation ${next.generation} was acquired (${next.kind} committed ${iso(ms(next.committed_at))}, db_time ${iso(ms(next.db_time))})`,
      );
    }
    const rel = j.released.get(u.generation);
    if (rel && c > ms(rel.committed_at))
      violate(
        'fencing',
        `${where}: committed at ${iso(c)} by generation ${u.generation}, ${c - ms(rel.committed_at)} ms after that generation released the lease`,
      );
    const claim = j.claims.get(u.generation);
    if (claim && claim.window_key !== u.window_key)
      violate(
        'fencing',
        `${where}: written by generation ${u.generation}, which had claimed window ${claim.window_key}`,
      );
  }

  // The ledger is written under the same rule: a window completed by g after g+1 existed.
  for (const [job, j] of ev) {
    for (const e of j.events) {
      if (e.kind !== 'window-completed') continue;
      const next = nextAcquisition(j, e.generation);
      if (next && ms(e.committed_at) > ms(next.committed_at)) {
        violate(
          'fencing',
          `${job} ${e.window_key}: completed by generation ${e.generation} at ${iso(ms(e.committed_at))}, after generation ${next.generation} was acquired (${iso(ms(next.committed_at))})`,
        );
      }
    }
  }

  // --- exactly once ------------------------------------------------------------------------
  // The primary key makes a second row for a unit impossible, so what is checked is what it
  // cannot show: a completed window has every unit; no window is completed twice or claimed
  // again once completed; no child found a unit it had not seen written appear under it; and
  // the effects log. Effects are attempted inside the fenced transaction (see chaos-writer.mjs),
  // so for one window (one IDEMPOTENCY_KEY) the tokens must never go down in database time: an
  // effect carrying token g after one carrying g' > g is exactly what a receiver keeping the
  // highest token would have to refuse, i.e. two owners acting on one occurrence at once.
  // Repeats of an item under the same key (a unit attempted, then its transaction lost to a
  // kill or a restart, then retried) are expected and counted: the key makes them harmless.
  const unitsByWindow = new Map();
  for (const u of data.units) {
    const key = k2(u.job, u.window_key);
    if (!unitsByWindow.has(key)) unitsByWindow.set(key, []);
    unitsByWindow.get(key).push(u);
  }
  const windowRows = new Map(data.windows.map((w) => [k2(w.job, w.window_key), w]));
  const targeted = new Map();
  for (const r of runs) targeted.set(k2(r.job, r.window), { job: r.job, window: r.window });
  for (const { job, window } of targeted.values()) {
    const w = windowRows.get(k2(job, window));
    const units = (unitsByWindow.get(k2(job, window)) ?? []).map((u) => u.unit).sort((a, b) => a - b);
    const n = unitsOf(job, window);
    if (w?.completed_at) {
      const missing = [];
      for (let i = 1; i <= n; i += 1) if (!units.includes(i)) missing.push(i);
      if (missing.length > 0)
        violate(
          'exactly-once',
          `${job} ${window}: completed (generation ${w.generation}) but units ${missing.join(',')} of ${n} are missing`,
        );
    }
    const extra = units.filter((x) => x < 1 || x > n);
    if (extra.length > 0) violate('exactly-once', `${job} ${window}: units outside 1..${n}: ${extra.join(',')}`);
  }
  for (const [job, j] of ev) {
    const completedAt = new Map();
    for (const e of j.events) {
      if (e.kind === 'window-completed') {
        if (completedAt.has(e.window_key))
          violate(
            'exactly-once',
            `${job} ${e.window_key}: completed twice (seq ${completedAt.get(e.window_key)} and ${e.seq}, generation ${e.generation})`,
          );
        else completedAt.set(e.window_key, e.seq);
      }
      if (e.kind === 'window-claimed' && completedAt.has(e.window_key)) {
        violate(
          'exactly-once',
          `${job} ${e.window_key}: claimed again by generation ${e.generation} (seq ${e.seq}) after it was completed (seq ${completedAt.get(e.window_key)})`,
        );
      }
    }
  }
  const byKey = new Map();
  let attempts = 0;
  for (const e of effects) {
    if (e.kind === 'conflict')
      violate(
        'exactly-once',
        `${e.job} ${e.window} unit ${e.unit}: child with token ${e.token} found it written by generation ${e.existing_generation} after it had read the window`,
      );
    if (e.kind !== 'effect') continue;
    attempts += 1;
    if (!byKey.has(e.key)) byKey.set(e.key, []);
    byKey.get(e.key).push(e);
  }
  const items = new Map();
  for (const [key, list] of byKey) {
    list.sort((a, b) => Date.parse(a.db_time) - Date.parse(b.db_time));
    let top;
    for (const e of list) {
      const tok = BigInt(e.token);
      if (top && tok < BigInt(top.token)) {
        violate(
          'exactly-once',
          `${key}: effect ${e.item} attempted with token ${e.token} at ${e.db_time}, after token ${top.token} had attempted ${top.item} at ${top.db_time} (a fencing receiver refuses it)`,
        );
      }
      if (!top || tok > BigInt(top.token)) top = e;
      const it = items.get(e.item) ?? { tokens: new Set(), n: 0 };
      it.tokens.add(e.token);
      it.n += 1;
      items.set(e.item, it);
    }
  }
  for (const u of data.units) {
    const it = items.get(`${u.job}:${u.window_key}:${u.unit}`);
    if (!it || !it.tokens.has(u.generation))
      violate(
        'exactly-once',
        `${u.job} ${u.window_key} unit ${u.unit}: committed by generation ${u.generation} with no effect attempt logged under that token (effects log incomplete)`,
      );
  }
  // Work the database forgot (a failover, a restore in place): tokens whose children attempted
  // effects but that the surviving history never acquired, the windows they worked on, and how
  // many of those were completed (again) in the end.
  const lostTokens = new Set();
  const lostWindows = new Set();
  for (const e of effects)
    if (e.kind === 'effect' && !J(e.job).acq.has(e.token)) {
      lostTokens.add(k2(e.job, e.token));
      lostWindows.add(k2(e.job, e.window));
    }
  figures.lostHistory = {
    generations: lostTokens.size,
    windows: lostWindows.size,
    completedAgain: [...lostWindows].filter((w) => windowRows.get(w)?.completed_at).length,
  };
  figures.effects = {
    attempts,
    items: items.size,
    repeatedItems: [...items.values()].filter((i) => i.n > 1).length,
    itemsUnderSeveralTokens: [...items.values()].filter((i) => i.tokens.size > 1).length,
  };

  // --- completion: every window a runner was started for is completed after the settle phase.
  for (const { job, window } of targeted.values()) {
    const w = windowRows.get(k2(job, window));
    if (!w?.completed_at)
      violate(
        'completion',
        `${job} ${window}: not completed after the faults stopped and up to 3 clean reruns (${w ? `outcome ${w.outcome}, attempts ${w.attempts}, generation ${w.generation}` : 'never claimed'})`,
      );
  }

  // --- generations: strictly increasing (by one) in event order, events never ahead of them.
  // A server start (pg-restart, failover) raises the token floor to the database clock (021):
  // the first acquisition after one may jump ahead instead of counting on by one.
  const starts = faults
    .filter((f) => (f.kind === 'pg-restart' || LOSSY_KINDS.has(f.kind)) && f.injected)
    .map((f) => db(LOSSY_KINDS.has(f.kind) ? f.upAt : f.at));
  const startedBetween = (a, b) => a !== undefined && starts.some((t) => t > a - 2_000 && t < b + 2_000);
  for (const job of jobs) {
    const j = J(job);
    let prev;
    let prevAt;
    let lastSeq = 0;
    for (const e of j.events) {
      if (e.seq !== lastSeq + 1) violate('generations', `${job}: event seq jumps from ${lastSeq} to ${e.seq}`);
      lastSeq = e.seq;
      if (e.kind === 'acquired' || e.kind === 'stale-takeover') {
        const g = BigInt(e.generation);
        // The next n, in the same epoch or (after a failover) a later one.
        if (prev !== undefined && g <= prev)
          violate('generations', `${job}: generation ${g} acquired at seq ${e.seq} after generation ${prev}`);
        else if (
          prev !== undefined &&
          g % EPOCH !== (prev % EPOCH) + 1n &&
          !(g % EPOCH > (prev % EPOCH) + 1n && startedBetween(prevAt, ms(e.db_time)))
        )
          violate(
            'generations',
            `${job}: generation ${g} acquired at seq ${e.seq}, expected n ${(prev % EPOCH) + 1n} after ${prev}`,
          );
        const prevNamed =
          e.detail?.previous_generation === undefined ? undefined : BigInt(e.detail.previous_generation);
        if (e.kind === 'stale-takeover' && (prevNamed === undefined || prevNamed !== prev || prevNamed >= g)) {
          violate(
            'generations',
            `${job}: stale-takeover to ${g} at seq ${e.seq} names previous generation ${e.detail?.previous_generation}`,
          );
        }
        prev = g;
        prevAt = ms(e.db_time);
      } else if (
        e.generation !== null &&
        e.kind !== 'fence-refused' &&
        (prev === undefined || BigInt(e.generation) > prev) &&
        // The owner of a generation a failover lost records its loss on the new primary.
        !(failovers.length > 0 && !j.acq.has(e.generation))
      ) {
        violate(
          'generations',
          `${job}: ${e.kind} for generation ${e.generation} at seq ${e.seq}, before that generation was acquired`,
        );
      }
    }
    const lease = data.leases.find((l) => l.name === job);
    if (lease && prev !== undefined && String(prev) !== lease.generation)
      violate('generations', `${job}: lease row at generation ${lease.generation}, last acquisition event ${prev}`);
  }

  // --- child lifetime ------------------------------------------------------------------------
  // For a run of generation g whose child ended at E (database clock: the earliest of the child's
  // own stamp, the harness seeing it gone in /proc, the runner logging its exit, and 'child
  // started' plus the runner's monotonic durationMs in 'child exited'). Each is at or after the
  // end (the stamp within the child's 300 ms of it), but any may come late: the server processing
  // the stamp's INSERT late, the harness's event loop busy (spawning 50 contenders) reading the
  // runner's lines and /proc late. A runner on a real clock stamps its lines itself; one under
  // libfaketime cannot be believed, so its lines are dated on arrival, and only the monotonic
  // bound is exact there (seed 210995442: an end 7 s late on clock-1, though the runner stopped
  // its child 0.6 s before the lease's earliest possible expiry):
  //   L(g): the latest the lease of g could have expired: its release time if g released it,
  //         else the expiry the successor found passed (stale-takeover detail previous_expired_at),
  //         else the lease row's expires_at (g is still the last generation).
  //   M(g): when the lease moved on: the commit of g's release or of g+1's acquisition.
  // A violation is E > M(g) + slack AND E > L(g) + slack: the child worked on after someone else
  // could hold the lease and after its own lease could have expired. (A child still running past
  // L(g) with nobody after it is late but harmless; one past M(g) but within L(g) cannot happen.)
  // Exceptions, each with its own rule instead:
  //   - paused (SIGSTOP) runs: a frozen runner cannot stop anything; the fence is what protects.
  //     Their child must be gone within RESUME_SLACK_MS of SIGCONT.
  //   - SIGKILLed runners: the child must be gone within PDEATH_SLACK_MS of the kill (parent-death
  //     signal through setpriv), or the run's group kill took it.
  // And a child that was never paused must never be refused by the fence: its runner is meant
  // to stop it (deadline at TTL - grace - margin) before the lease can expire, so a refusal
  // means the runner was late.
  const endsByRun = new Map(data.childEnds.map((c) => [k2(c.job, `${c.generation}:${c.pid}`), c]));
  for (const r of runs) {
    if (!r.child || r.generation === undefined) continue;
    const j = J(r.job);
    const g = r.generation;
    const stamp = endsByRun.get(k2(r.job, `${g}:${r.child.pid}`));
    const byDuration =
      r.child.durationMs !== undefined && r.child.startedAt !== undefined
        ? r.child.startedAt + r.child.durationMs
        : undefined;
    const observed = [r.child.goneAt, r.child.exitedLineAt, byDuration].filter((t) => t !== undefined).map(db);
    if (stamp) observed.push(ms(stamp.ended_at));
    const E = observed.length ? Math.min(...observed) : undefined;
    r.child.end = E;
    const who = `${r.job} ${r.window} generation ${g} (run ${r.id}, host ${r.host}, child ${r.child.pid})`;
    if (E === undefined) {
      violate('child-lifetime', `${who}: child still alive at the end of the round`);
      continue;
    }
    const rel = j.released.get(g);
    const succ = j.successorOf.get(g) ?? nextAcquisition(j, g);
    const lease = data.leases.find((l) => l.name === r.job);
    const L = rel
      ? ms(rel.db_time)
      : succ?.detail?.previous_expired_at
        ? ms(succ.detail.previous_expired_at)
        : lease?.generation === g
          ? ms(lease.expires_at)
          : undefined;
    const moved = [rel && ms(rel.committed_at), succ && ms(succ.committed_at)].filter((t) => t !== undefined);
    const M = moved.length ? Math.min(...moved) : Infinity;
    const paused = r.faults.find((f) => f.kind === 'pause');
    const killed = killedBy(r);
    const failover = acrossFailover(r);
    if (L !== undefined && !rel && !paused && !killed && !failover) figures.marginMs.push(L - E);
    if (failover && !killed) {
      // Its renewal on the new primary finds the loss: the child is stopped within a TTL of the promotion.
      const limit = db(failover.upAt) + TTL_MS + RESUME_SLACK_MS;
      if (lostGeneration(r) && !paused && E > limit)
        violate(
          'child-lifetime',
          `${who}: its acquisition was lost in the ${failover.kind} (server up again ${iso(db(failover.upAt))}), yet its child ended ${E - db(failover.upAt)} ms later (limit TTL + ${RESUME_SLACK_MS} ms)`,
        );
    } else if (paused) {
      const limit = db(paused.resumedAt ?? paused.at) + RESUME_SLACK_MS;
      if (E > Math.max(limit, M + END_SLACK_MS))
        violate(
          'child-lifetime',
          `${who}: paused until ${iso(db(paused.resumedAt))}, child ended ${E - db(paused.resumedAt)} ms after SIGCONT (limit ${RESUME_SLACK_MS} ms)`,
        );
    } else if (killed) {
      figures.pdeathMs.push(E - db(killed.at));
      // The guard stops the child of a runner killed alone, with or without setpriv (parentDeathSignal
      // now guards only against the guard's own death).
      if (killed.kind !== 'kill-group') {
        if (E > db(killed.at) + PDEATH_SLACK_MS)
          violate(
            'child-lifetime',
            `${who}: runner SIGKILLed at ${iso(db(killed.at))}, child lived ${E - db(killed.at)} ms more (no parent-death signal?)`,
          );
        const after = effects.filter(
          (e) =>
            e.kind === 'effect' &&
            e.pid === r.child.pid &&
            Date.parse(e.db_time) > db(killed.at) + PDEATH_EFFECT_SLACK_MS,
        );
        if (after.length > 0)
          violate(
            'child-lifetime',
            `${who}: runner SIGKILLed at ${iso(db(killed.at))}, child still attempted ${after.length} effect(s), the first at ${after[0].db_time}`,
          );
      }
    } else {
      if (L !== undefined && E > M + END_SLACK_MS && E > L + END_SLACK_MS) {
        const started = db(r.child.startedAt);
        const late =
          started > L
            ? `; it was only started at ${iso(started)}, ${started - L} ms after that expiry (runner logged 'lease acquired' ${db(r.acquiredAt) !== undefined ? `${started - db(r.acquiredAt)} ms before 'child started'` : 'never'})`
            : '';
        violate(
          'child-lifetime',
          `${who}: child ended at ${iso(E)}, ${E - L} ms after its lease's last possible expiry ${iso(L)} and ${E - M} ms after the lease moved on (${iso(M)})${late}`,
        );
      }
      const refused =
        stamp?.reason === 'fence-refused' ||
        effects.some((e) => e.kind === 'refused' && e.pid === r.child.pid && e.token === g);
      // A step of the database's clock (db-clock-step) expires the lease on that clock at once:
      // assert_lease then refuses the child's next write, as it should, and the runner stops the
      // child at its next renewal (TTL/3 later at most), its grace included: within a TTL. Any run
      // alive at the step (its lease may have been taken on the clock before it).
      const stepped = steps.find((f) => r.startedAt <= f.at && (r.exitedAt ?? Infinity) >= f.at);
      if (refused && stepped) {
        if (E > db(stepped.at) + TTL_MS + END_SLACK_MS)
          violate(
            'child-lifetime',
            `${who}: the database clock stepped ${stepped.stepMs} ms forward at ${iso(db(stepped.at))}; its child, refused by the fence, ended ${E - db(stepped.at)} ms later (limit TTL + ${END_SLACK_MS} ms)`,
          );
      } else if (refused)
        violate(
          'child-lifetime',
          `${who}: never paused, yet its child was refused by the fence: the runner did not stop it before the lease expired (lease lost: ${r.lossReason ?? 'not logged'})`,
        );
    }
    if (r.lostAt !== undefined && !paused) figures.lossToStopMs.push(Math.max(0, E - db(r.lostAt)));
    if (r.exitedAt !== undefined && !killed && E > db(r.exitedAt) + END_SLACK_MS)
      violate('child-lifetime', `${who}: child ended ${E - db(r.exitedAt)} ms after its runner exited`);
  }
  // A runner SIGKILLed at its child's spawn: once its guard had stopped the group, no process
  // of that runner's was left (the injector looked in /proc, by LEASEJOB_OWNER).
  for (const f of faults.filter((f) => f.kind === 'kill-at-spawn' && f.injected && f.orphans?.length))
    violate(
      'child-lifetime',
      `${f.job} ${f.window} (run ${f.run}, host ${f.host}): runner SIGKILLed at its child's spawn (${f.mode}) at ${iso(db(f.at))}, ` +
        `yet ${f.orphans.length} process(es) of it still ran 5 s later: ${f.orphans.join(', ')}`,
    );
  checkOneLiveChild(runs, { db, violate, acrossFailover });

  // --- exit codes ----------------------------------------------------------------------------
  const outages = (r) => {
    const spans = faults
      .filter((f) => (f.kind === 'pg-restart' || LOSSY_KINDS.has(f.kind)) && f.injected)
      .map((f) => [f.at, f.readyAt ?? f.upAt]);
    for (const f of faults)
      if (f.kind === 'partition' && f.injected && f.host === r.host) spans.push([f.at, f.healedAt]);
    // A runner reaching the database just after it came back may still see the tail of it.
    return spans.some(([a, b]) => r.startedAt <= (b ?? a) + 2_000 && (r.exitedAt ?? Infinity) >= a);
  };
  // 50 runners starting at once leave this 2-core machine's CPU (the database's included) fully
  // taken for a second or two: a statement whose answer cannot come within its bound (an
  // acquire's is under 2.2 s at TTL 3 s) is then reported as the database not answering, and a
  // connection not set up within pg's 5 s connect timeout (seen in CI: a run started 0.2 s into
  // the burst) as a connection timeout. Allowed only for those messages and only then; a
  // completed window still must exit 0 (below).
  const overloaded = (r) =>
    /did not answer within \d+ ms|Connection terminated due to connection timeout/.test(r.stderr) &&
    faults.some(
      (f) =>
        f.kind === 'contenders-50' &&
        f.injected &&
        r.startedAt <= (f.overAt ?? f.at) + 2_000 &&
        (r.exitedAt ?? Infinity) >= f.at,
    );
  for (const r of runs) {
    const who = `run ${r.id} (${r.job} ${r.window}, host ${r.host}, ${r.phase}, generation ${r.generation ?? '-'})`;
    const got = r.signal ? r.signal : String(r.code);
    if (stragglers.includes(r)) {
      const last = r.lines.at(-1);
      violate(
        'exit-codes',
        `${who}: still running ${r.silentS} s after its last log line ('${last?.msg ?? 'none'}'); killed by the harness (${r.diagnosis ?? 'no diagnosis'})`,
      );
      continue;
    }
    const killed = killedBy(r);
    if (killed) {
      if (r.signal !== 'SIGKILL') violate('exit-codes', `${who}: SIGKILLed by the harness but exited ${got}`);
      continue;
    }
    if (r.signal) {
      violate('exit-codes', `${who}: died by ${r.signal}, which nobody sent`);
      continue;
    }
    const j = J(r.job);
    const completedByMe = r.generation !== undefined && j.completed.has(r.generation);
    const skipped =
      r.generation === undefined &&
      r.lines.some(
        (l) =>
          l.msg === 'lease busy' ||
          // --on-busy replace finding the same window, or a later one: skipped as busy.
          String(l.msg).startsWith('lease busy with this or a later occurrence') ||
          l.msg === 'window already completed' ||
          String(l.msg).startsWith('occurrence exhausted'),
      );
    const takenOver = r.generation !== undefined && j.successorOf.has(r.generation);
    const lost = r.lostAt !== undefined || r.lines.some((l) => LOSS_MESSAGES.has(l.msg));
    const fenceRefused = r.child?.exitCode === 75;
    const waitedOut = /after waiting \d+ ms \(--wait-timeout\)/.test(r.stderr);
    let ok;
    let why;
    // Across a failover: a completion lost with the primary (exit 0), a loss (75), the outage (69).
    if (acrossFailover(r) && [0, 69, 75].includes(r.code)) continue;
    switch (r.code) {
      case 0:
        ok = (completedByMe || skipped) && !takenOver;
        why = takenOver ? 'its lease was taken over' : 'it neither completed its window nor skipped';
        break;
      case 75:
        ok = lost || takenOver || fenceRefused || waitedOut;
        why = 'no lease loss, fence refusal or wait timeout to explain it';
        break;
      case 70:
        // Its guard stopped (the stop-guard fault): the runner stopped the child itself.
        ok =
          r.faults.some((f) => f.kind === 'stop-guard') &&
          r.lines.some((l) => String(l.msg).startsWith('the guard stopped answering'));
        why = 'no stopped guard to explain it';
        break;
      case 69:
        ok = outages(r) || overloaded(r);
        why =
          'no database outage (restart, partition of its host) nor a 50-runner burst (with a statement or connection timed out) during its life';
        break;
      default:
        ok = false;
        why = `unexpected code; last lines: ${r.stderr.trim().split('\n').slice(-2).join(' | ').slice(0, 400)}`;
    }
    if (!ok) {
      const tail = r.stderr.trim().split('\n').slice(-3).join(' | ').slice(0, 600);
      violate(
        'exit-codes',
        `${who}: exited ${got}, but ${why}; child ${r.child ? `exited ${r.child.exitCode ?? r.child.signal ?? '?'}` : 'never started'}; last lines: ${tail}`,
      );
    }
    if (completedByMe && r.code !== 0)
      violate('exit-codes', `${who}: its generation completed the window, yet it exited ${got}`);
  }

  checkBudget(runs, violate, figures, (r) => acrossFailover(r) !== undefined);
  checkReplace(data, runs, violate, figures);

  const tooLate = (r) => r.lines.some((l) => l.msg === 'lease acquired too late to start safely');
  // --- contenders: one winner per 50-runner window. A further claim is only allowed as the
  // stale-takeover of a claimant whose runner logged the loss of its lease (a winner starved
  // of CPU on this 2-core machine), or after a claimant that gave back a lease its unanswered
  // acquire took: two claims without a loss or a give-back between them are two winners.
  for (const cw of crowdWindows) {
    const claims = J(cw.job).events.filter((e) => e.kind === 'window-claimed' && e.window_key === cw.window);
    if (claims.length === 0)
      violate('contenders', `${cw.job} ${cw.window}: never claimed by any of ${cw.runs.length} contenders`);
    for (const [i, c] of claims.entries()) {
      if (i === 0) continue;
      const before = claims[i - 1].generation;
      const loser = runs.find((r) => r.job === cw.job && r.generation === before);
      const acq = J(cw.job).acq.get(c.generation);
      // Or after a claimant whose acquire committed unanswered and who gave the lease back.
      const gaveBack = runs.find((r) => r.job === cw.job && r.abandoned === before);
      if (gaveBack && !gaveBack.child && J(cw.job).released.has(before) && acq?.kind === 'acquired') continue;
      // Or after a claimant whose acquisition was answered too late to start its child safely
      // (a starved CPU): it released without starting anything, so nobody worked twice.
      if (loser && !loser.child && tooLate(loser) && J(cw.job).released.has(before) && acq?.kind === 'acquired')
        continue;
      // Or after a claimant that logged the loss of its lease, stopped its child and then still
      // released it itself (its renewals starved, the database answering again): the next
      // claim then finds the lease released, not stale, and nobody worked at the same time.
      if (loser && loser.lostAt !== undefined && J(cw.job).released.has(before) && acq?.kind === 'acquired') continue;
      // A loss the winner found only at its finish (a database clock step expired its lease
      // before any renewal; its child, refused by the fence, had ended): one-live-child judges
      // whether the two children overlapped.
      const lost = loser !== undefined && (loser.lostAt !== undefined || loser.lostAtFinish !== undefined);
      if (acq?.kind !== 'stale-takeover' || !lost) {
        violate(
          'contenders',
          `${cw.job} ${cw.window}: claimed by generation ${c.generation} (${acq?.kind}) after generation ${before} claimed it, whose runner ${loser ? 'logged no lease loss' : 'is unknown'}`,
        );
      }
    }
    figures.crowdClaims = (figures.crowdClaims ?? 0) + claims.length;
    // As in the exit-code check: 69 only with a statement or a connection timed out in the burst's CPU starvation.
    const bad = runs.filter(
      (r) =>
        cw.runs.includes(r.id) &&
        (r.signal ||
          (r.code !== 0 &&
            !(r.code === 75 && (r.lostAt !== undefined || r.lostAtFinish !== undefined || (tooLate(r) && !r.child))) &&
            !(r.code === 69 && overloaded(r)))),
    );
    if (bad.length > 0)
      violate(
        'contenders',
        `${cw.job} ${cw.window}: ${bad.length} contenders exited neither 0, 75 after a lease loss, nor 69 on a timed-out statement or connection (${bad
          .slice(0, 5)
          .map((r) => `run ${r.id}: ${r.signal ?? r.code}`)
          .join(', ')})`,
      );
  }

  // --- figures -------------------------------------------------------------------------------
  for (const f of faults) {
    if (!f.injected || !['kill-runner', 'kill-group', 'kill-at-spawn'].includes(f.kind) || f.generation === undefined)
      continue;
    const succ = J(f.job).successorOf.get(f.generation);
    if (succ) figures.takeoverMs.push(ms(succ.db_time) - db(f.at));
  }
  const counts = {};
  for (const e of data.events) counts[e.kind] = (counts[e.kind] ?? 0) + 1;
  figures.events = counts;
  return { invariants: inv, figures };
}

/**
 * one-live-child: per job, no child started while another child of the job was still alive
 * (from its start as the harness saw it, to its end E as child-lifetime worked it out). Runs
 * alive across a failover are left out: there a lost acquisition's child runs on until its
 * runner's next renewal finds the loss (their own rule, in child-lifetime). A child whose end is
 * unknown counts as alive to the end of the round.
 */
function checkOneLiveChild(runs, { db, violate, acrossFailover }) {
  const byJob = new Map();
  for (const r of runs) {
    if (!r.child || r.child.startedAt === undefined || acrossFailover(r)) continue;
    const list = byJob.get(r.job) ?? [];
    list.push({ r, start: db(r.child.startedAt), end: r.child.end ?? Infinity });
    byJob.set(r.job, list);
  }
  for (const [job, list] of byJob) {
    list.sort((a, b) => a.start - b.start);
    for (let i = 0; i < list.length; i++)
      for (let k = i + 1; k < list.length && list[k].start < list[i].end; k++) {
        const [a, b] = [list[i], list[k]];
        if (b.start + END_SLACK_MS >= a.end) continue;
        violate(
          'one-live-child',
          `${job}: the child of run ${b.r.id} (${b.r.window}, generation ${b.r.generation}, host ${b.r.host}) started at ${iso(b.start)} ` +
            `while that of run ${a.r.id} (${a.r.window}, generation ${a.r.generation}, host ${a.r.host}, faults ${a.r.faults.map((f) => f.kind).join(',') || 'none'}) ` +
            `was alive until ${iso(a.end)}`,
        );
      }
  }
}

/**
 * replace (run --on-busy replace): only an earlier occurrence is asked to stop; a replaced window
 * completes later (the settle phase reruns it); the replaced run exits 75.
 */
function checkReplace(data, runs, violate, figures) {
  const completed = new Set(data.windows.filter((w) => w.completed_at !== null).map((w) => k2(w.job, w.window_key)));
  for (const e of data.events) {
    if (e.kind === 'replace-requested') {
      figures.replaceRequests = (figures.replaceRequests ?? 0) + 1;
      // Window keys of the scheduled jobs are ISO hours: their order is the occurrences' order.
      if (!(String(e.detail?.for_window) > String(e.window_key)))
        violate(
          'replace',
          `${e.job} ${e.window_key}: replace asked for ${e.detail?.for_window}, not a later occurrence`,
        );
    }
    if (e.kind !== 'window-replaced') continue;
    figures.replaced = (figures.replaced ?? 0) + 1;
    if (!completed.has(k2(e.job, e.window_key)))
      violate('replace', `${e.job} ${e.window_key}: replaced (generation ${e.generation}) and never completed later`);
    const run = runs.find((r) => r.job === e.job && r.generation === e.generation);
    if (run && run.code !== 75)
      violate('replace', `${e.job} ${e.window_key}: run #${run.id} was replaced but exited ${run.signal ?? run.code}`);
  }
}

/**
 * budget (run --max-attempts): a runner given a budget never starts its child for an attempt
 * beyond it, and a window's children started by budgeted runners are never more than the
 * budget, whatever the faults did to the attempts before (kills, losses, takeovers). Runners
 * without a budget (the clean reruns after the faults) are not counted. A failover or a restore
 * in place can forget attempts (the window's count goes back with the database): a start by a
 * run alive across one (`acrossLoss`) may be one the database no longer counts, and is not held
 * against the budget.
 */
function checkBudget(runs, violate, figures, acrossLoss) {
  const perWindow = new Map();
  for (const r of runs) {
    if (!r.maxAttempts) continue;
    if (r.lines.some((l) => String(l.msg).startsWith('occurrence exhausted')))
      figures.exhaustedSkips = (figures.exhaustedSkips ?? 0) + 1;
    if (!r.child) continue;
    if (typeof r.attempt !== 'number' || r.attempt > r.maxAttempts)
      violate(
        'budget',
        `${r.job} ${r.window} run #${r.id}: child started for attempt ${r.attempt}, budget ${r.maxAttempts}`,
      );
    const key = `${r.job} ${r.window}`;
    const w = perWindow.get(key) ?? { starts: 0, forgettable: 0, budget: r.maxAttempts };
    w.starts += 1;
    if (acrossLoss(r)) w.forgettable += 1;
    perWindow.set(key, w);
  }
  for (const [key, w] of perWindow) {
    if (w.starts - w.forgettable > w.budget)
      violate(
        'budget',
        `${key}: ${w.starts} budgeted child starts (${w.forgettable} across lost history), budget ${w.budget}`,
      );
    figures.budgetedStartsMax = Math.max(figures.budgetedStartsMax ?? 0, w.starts);
  }
}
