#!/usr/bin/env node
// The chaos suite: many real `leasejob run` processes on several jobs and windows, faults
// injected at seeded random times, invariants checked after every round, figures reported.
//
//   npm run chaos -- --rounds N --seed S [--duration-s D] [--bounded] [--jobs J] [--keep] [--json FILE] [--sabotage no-fence]
//                    [--isolation LEVEL] [--failover | --restore-in-place] [--db-clock-step]
//
// Plain Node (no TypeScript, no vitest) against the built CLI (`npm run build` first; the
// `chaos` script does it). It starts its own PostgreSQL so that it can restart it. The seed
// reproduces the fault schedule and every parameter drawn; the interleavings still depend on
// timing, so a failure is reproduced by running the same seed again, sometimes a few times.
// Exit 0 when every invariant held, 1 when one was violated, 2 on a harness error.
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { execFileSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { faketimeLibrary } from '../helpers/faketime.mjs';
import { procStat } from '../helpers/proc.mjs';
import { checkRound, loadRound } from './lib/checks.mjs';
import { BIN, startCluster, startHosts } from './lib/cluster.mjs';
import { FAULT_KINDS, Injector, LOSSY_KINDS, planFaults } from './lib/faults.mjs';
import { Fleet, windowOf } from './lib/fleet.mjs';
import { checkOperators, installOperatorWatch, Operators } from './lib/operators.mjs';
import { Lifecycle, PENDING_INVARIANTS } from './lib/lifecycle.mjs';
import { RetryBudget } from './lib/retry-budget.mjs';
import { floodFigures, ScrapeFlood } from './lib/scrape-flood.mjs';
import { stream } from './lib/prng.mjs';
import { printReport, summarize } from './lib/report.mjs';
import { signalGroup } from '../helpers/signal.mjs';

const USAGE =
  'usage: node test/chaos/run.mjs --rounds N --seed S [--duration-s D>=20] [--bounded] [--jobs J] [--keep] [--json FILE] ' +
  '[--sabotage no-fence] [--isolation LEVEL] [--failover | --restore-in-place] [--db-clock-step]\n' +
  '(npm run chaos -- ... builds first; test/chaos/README.md says what each option and invariant is)\n';
const { values: args } = parseArgs({
  options: {
    help: { type: 'boolean', short: 'h', default: false },
    rounds: { type: 'string', default: '1' },
    seed: { type: 'string' },
    'duration-s': { type: 'string' },
    bounded: { type: 'boolean', default: false },
    jobs: { type: 'string', default: '4' },
    keep: { type: 'boolean', default: false },
    json: { type: 'string' },
    // Checks the checker: `no-fence` makes every child skip assert_lease, and the run must
    // then report fencing violations (after a pause, a stale child's writes go through).
    sabotage: { type: 'string' },
    // The chaos database's default_transaction_isolation, for every runner, child, PgBouncer
    // and checker connection: leasejob must hold its invariants under a stricter default.
    isolation: { type: 'string' },
    // A real failover fault: the database is Debian postgresql-15 with a streaming standby
    // behind one moving address (opt-in: it needs postgresql-15, and each failover a base backup).
    failover: { type: 'boolean', default: false },
    // A physical backup started in place of the crashed server (history lost with no new
    // timeline): a lone Debian postgresql-15 server (opt-in, as --failover).
    'restore-in-place': { type: 'boolean', default: false },
    // The database's own wall clock steps forward under the runners (libfaketime on the server
    // only): the two-clock takeover (docs/fencing.md). Opt-in, as --failover.
    'db-clock-step': { type: 'boolean', default: false },
  },
});
if (args.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
if (args.failover && args['restore-in-place']) {
  process.stderr.write('chaos: --failover and --restore-in-place need different servers: choose one\n');
  process.exit(2);
}
if (args.sabotage !== undefined && args.sabotage !== 'no-fence') {
  process.stderr.write('chaos: --sabotage takes `no-fence`\n');
  process.exit(2);
}
if (args.sabotage) process.env.CHAOS_SABOTAGE = args.sabotage;
const ISOLATIONS = ['read committed', 'repeatable read', 'serializable'];
if (args.isolation !== undefined && !ISOLATIONS.includes(args.isolation)) {
  process.stderr.write(`chaos: --isolation takes ${ISOLATIONS.map((l) => `\`${l}\``).join(', ')}\n`);
  process.exit(2);
}
const ROUNDS = Number(args.rounds);
const SEED = args.seed ?? String(randomInt(1, 2 ** 31));
// A bounded round is the one `npm test` runs: about two minutes in all on 2 cores.
const DURATION_S = Number(args['duration-s'] ?? (args.bounded ? 75 : 90));
const JOBS = Number(args.jobs);
const BOUNDED_BUDGET_S = 240;
// Runners alive at once outside the 50-contender burst: 2 cores.
const MAX_LIVE = 12;
const DRAIN_LIMIT_MS = 60_000;
const SETTLE_ATTEMPTS = 3;
// The attempt budget of the budgeted job's fault-phase runners (the invariant `budget`).
const MAX_ATTEMPTS = 2;

if (!Number.isInteger(ROUNDS) || ROUNDS < 1 || !(DURATION_S >= 20) || !Number.isInteger(JOBS) || JOBS < 1) {
  process.stderr.write(USAGE);
  process.exit(2);
}
try {
  execFileSync(process.execPath, [BIN, '--version'], { stdio: 'ignore', timeout: 30_000 });
} catch {
  process.stderr.write(
    'chaos: the built CLI does not start: run `npm run build` (or `npm run chaos`, which builds first)\n',
  );
  process.exit(2);
}

// What to tear down if the harness itself is interrupted (Ctrl-C, a test runner's timeout):
// runners are detached process groups and would otherwise outlive it.
const live = { fleets: new Set(), operators: new Set(), stops: [] };
/** SIGKILL a run's process group and its child's (each leads its own). */
function killRun(r) {
  for (const group of [r.pid, r.child?.pid]) {
    try {
      if (group) signalGroup(group, 'SIGKILL');
    } catch {
      // gone
    }
  }
}
function killFleets() {
  for (const ops of live.operators) ops.kill();
  for (const fleet of live.fleets) {
    fleet.closed = true;
    for (const r of fleet.live()) killRun(r);
  }
}
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => {
    process.stderr.write(`chaos: ${sig}: stopping runners and PostgreSQL\n`);
    killFleets();
    Promise.allSettled(live.stops.map((stop) => stop())).then(() => {
      killFleets();
      process.exit(130);
    });
  });
}

/**
 * --db-clock-step: the database server's clock file (libfaketime, readable by the server's user),
 * at +0 s until a `db-clock-step` fault moves it; undefined without libfaketime.
 */
function databaseClock(workDir) {
  const library = faketimeLibrary();
  if (!library) return undefined;
  const file = path.join(workDir, 'db-clock');
  const state = { library, file, offsetS: 0 };
  state.step = (seconds) => {
    state.offsetS += seconds;
    writeFileSync(`${file}.tmp`, `+${state.offsetS}s\n`);
    chmodSync(`${file}.tmp`, 0o644);
    renameSync(`${file}.tmp`, file);
  };
  state.step(0);
  return state;
}

const say = (line) => process.stdout.write(`[chaos ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const started = Date.now();
  say(
    `seed ${SEED} (reproduce: npm run chaos -- --rounds ${ROUNDS} --seed ${SEED}${args['duration-s'] ? ` --duration-s ${DURATION_S}` : ''}${args.bounded ? ' --bounded' : ''}${args.isolation ? ` --isolation '${args.isolation}'` : ''}${args.failover ? ' --failover' : ''}${args['restore-in-place'] ? ' --restore-in-place' : ''}${args['db-clock-step'] ? ' --db-clock-step' : ''})`,
  );
  const workDir = mkdtempSync(path.join(tmpdir(), 'leasejob-chaos-'));
  chmodSync(workDir, 0o755);
  const notes = [];
  if (args.failover || args['restore-in-place']) {
    const { replicationMissing } = await import('../helpers/replication.mjs');
    const why = replicationMissing();
    if (why) {
      const flag = args.failover ? '--failover' : '--restore-in-place';
      process.stderr.write(`chaos: ${flag} needs Debian's PostgreSQL 15 (pg_basebackup): ${why}\n`);
      process.exit(2);
    }
  }
  const dbClock = args['db-clock-step'] ? databaseClock(workDir) : undefined;
  const cluster = await startCluster({
    schema: 'leasejob',
    isolation: args.isolation,
    failover: args.failover,
    restoreInPlace: args['restore-in-place'],
    dbClock,
  });
  await installOperatorWatch(cluster.pool, 'leasejob');
  live.stops.push(() => cluster.stop());
  let hostsCtl;
  const rounds = [];
  const skippedKinds = {};
  try {
    hostsCtl = await startHosts({ cluster, workDir, notes });
    live.stops.unshift(() => hostsCtl.stop());
    say(
      `PostgreSQL on port ${cluster.server.port}${args.isolation ? ` (default isolation ${args.isolation})` : ''}; hosts: ${hostsCtl.hosts.map((h) => h.name).join(', ')}; work dir ${workDir}`,
    );
    const parentDeathSignal = ['/usr/bin/setpriv', '/bin/setpriv'].some((p) => existsSync(p));
    if (!parentDeathSignal)
      notes.push(
        "setpriv not found: the child has no parent-death signal against its guard's own death (the guard itself stops it when a runner dies)",
      );
    const available = new Set();
    for (const k of FAULT_KINDS) {
      if (k.needs === 'clock' && !hostsCtl.hosts.some((h) => h.clockFile)) skippedKinds[k.kind] = 'libfaketime absent';
      else if (k.needs === 'bouncer' && !hostsCtl.byName('bouncer')) skippedKinds[k.kind] = 'pgbouncer absent';
      else if (k.needs === 'failover' && !args.failover) skippedKinds[k.kind] = 'opt-in: --failover';
      else if (k.needs === 'restore' && !args['restore-in-place']) skippedKinds[k.kind] = 'opt-in: --restore-in-place';
      else if (k.needs === 'db-clock' && !cluster.dbClock)
        skippedKinds[k.kind] = args['db-clock-step'] ? 'libfaketime absent' : 'opt-in: --db-clock-step';
      else available.add(k.kind);
    }
    for (let round = 1; round <= ROUNDS; round += 1) {
      rounds.push(await runRound({ round, cluster, hostsCtl, workDir, available, parentDeathSignal }));
    }
  } finally {
    killFleets();
    await hostsCtl?.stop().catch(() => {});
    await cluster.stop().catch(() => {});
  }
  const summary = summarize({
    seed: SEED,
    bounded: args.bounded,
    durationS: DURATION_S,
    isolation: args.isolation ?? 'read committed',
    rounds,
    notes,
    skippedKinds,
    clockOffsetMs: cluster.clockOffsetMs,
    elapsedMs: Date.now() - started,
  });
  if (args.bounded && summary.elapsedS > BOUNDED_BUDGET_S) {
    summary.notes.push(`bounded run took ${summary.elapsedS} s, over its ${BOUNDED_BUDGET_S} s budget`);
    summary.overBudget = true;
  }
  printReport(summary);
  if (args.json) writeFileSync(args.json, JSON.stringify(summary, null, 2));
  if (summary.violations === 0 && !args.keep) rmSync(workDir, { recursive: true, force: true });
  else say(`work dir kept for inspection: ${workDir} (runner logs in round*-runs/)`);
  return summary.violations === 0 && !summary.overBudget ? 0 : 1;
}

async function runRound({ round, cluster, hostsCtl, workDir, available, parentDeathSignal }) {
  const rng = stream(SEED, `round-${round}/launch`);
  // The database clock's steps of earlier rounds (--db-clock-step): the harness-to-database
  // offset this round starts from.
  const dbClockAheadMs = (cluster.dbClock?.offsetS ?? 0) * 1000;
  const plan = planFaults({ rng: stream(SEED, `round-${round}/faults`), durationMs: DURATION_S * 1000, available });
  const effectsFile = path.join(workDir, `round${round}-effects.jsonl`);
  writeFileSync(effectsFile, '');
  const fleet = new Fleet({ cluster, effectsFile });
  live.fleets.add(fleet);
  // The day-2 commands beside the runs, on jobs of their own (lib/operators.mjs).
  const ops = new Operators({
    url: cluster.directUrl,
    schema: 'leasejob',
    rng: stream(SEED, `round-${round}/operators`),
    round,
    workDir,
  });
  live.operators.add(ops);
  // Issue 19's actors: a release after a crash, a schedule change, an embedded store restored.
  const life = new Lifecycle({
    url: cluster.directUrl,
    schema: 'leasejob',
    rng: stream(SEED, `round-${round}/lifecycle`),
    round,
    workDir,
  });
  live.operators.add(life);
  // Issue 44's actors: a --retries run after crashed holders (the budget), on a job of its own;
  // a scrape flood against an exporter of the round.
  const flood = new ScrapeFlood({
    url: cluster.directUrl,
    schema: 'leasejob',
    rng: stream(SEED, `round-${round}/scrape-flood`),
    round,
  });
  const actors44 = [
    flood,
    new RetryBudget({
      url: cluster.directUrl,
      schema: 'leasejob',
      rng: stream(SEED, `round-${round}/retry-budget`),
      round,
      workDir,
    }),
  ];
  for (const a of actors44) live.operators.add(a);
  const jobs = Array.from({ length: JOBS }, (_, i) => ({
    name: `r${round}-job${i + 1}`,
    mode: i % 2 === 0 ? 'schedule' : 'literal',
    units: rng.int(14, 20),
    current: 0,
    completed: new Set(),
    target: 2,
    nextLaunchAt: 0,
    // The second job's fault-phase runners get an attempt budget (run --max-attempts); the
    // clean reruns after the faults do not, so its exhausted windows still complete.
    maxAttempts: i === 1 ? MAX_ATTEMPTS : undefined,
  }));
  const crowdJob = { name: `r${round}-crowd`, mode: 'literal', units: 6 };
  const crowdWindows = [];
  const hostWeights = hostsCtl.hosts.flatMap((h) => (h.name === 'direct' ? [h, h] : [h]));
  const launchFor = (job, host, onBusy = rng.chance(0.75) ? 'wait' : 'skip', index = job.current) =>
    fleet.launch({
      job,
      windowIndex: index,
      host,
      onBusy,
      units: job.units,
      delayMs: rng.int(80, 220),
      phase: 'chaos',
      maxAttempts: job.maxAttempts,
    });

  const injector = new Injector({
    rng: stream(SEED, `round-${round}/victims`),
    fleet,
    hostsCtl,
    cluster,
    launchCrowd: async (n) => {
      // A blocker holds the crowd job's lease (on another window) while the contenders start, so
      // that they race for the freed lease together once their Node processes are up, instead of
      // the first one up winning while 49 others starting still starve it of CPU.
      const k = crowdWindows.length;
      const blocker = fleet.launch({
        job: crowdJob,
        windowIndex: 500 + k,
        host: hostsCtl.byName('direct'),
        onBusy: 'wait',
        units: 40,
        delayMs: 150,
        phase: 'crowd',
      });
      for (let i = 0; i < 100 && blocker.child === undefined && blocker.exitedAt === undefined; i += 1)
        await sleep(100);
      const runs = Array.from({ length: n }, () =>
        fleet.launch({
          job: crowdJob,
          windowIndex: k,
          host: hostsCtl.byName('direct'),
          onBusy: rng.chance(0.6) ? 'wait' : 'skip',
          units: crowdJob.units,
          delayMs: 100,
          phase: 'crowd',
          nice: true,
          waitTimeout: '30s',
        }),
      );
      crowdWindows.push({
        job: crowdJob.name,
        window: runs[0].window,
        runs: runs.map((r) => r.id),
        blocker: blocker.id,
      });
      return [blocker, ...runs];
    },
    sequenceStep: (limitMs) => ops.sequenceStep(cluster.pool, limitMs),
    launchVia: (hostName) => {
      const job = rng.pick(jobs);
      return launchFor(job, hostsCtl.byName(hostName), 'wait');
    },
  });

  say(
    `round ${round}: ${jobs.length} jobs, ${plan.length} faults planned: ${plan.map((f) => `${f.kind}@${(f.at / 1000).toFixed(1)}s`).join(' ')}`,
  );
  const t0 = Date.now();
  ops.start(cluster.pool);
  life.start(cluster.pool);
  for (const a of actors44) a.start(cluster.pool);
  const timers = plan.map((f) =>
    setTimeout(() => {
      say(
        `round ${round}: fault ${f.kind}${f.mode ? ` (${f.mode})` : ''}${f.holdMs ? ` for ${f.holdMs} ms` : ''}${f.skewS ? ` ${f.skewS} s` : ''}`,
      );
      injector.fire(f).then((rec) => {
        if (LOSSY_KINDS.has(rec.kind) && rec.injected) say(`round ${round}: ${rec.kind} done: ${lossLine(rec)}`);
      });
    }, f.at),
  );

  // The launcher: each job works through its windows in order, with 2-3 runners at a time on
  // the current one (cron on several hosts), now and then a late duplicate of a completed one.
  const names = jobs.map((j) => j.name);
  while (Date.now() - t0 < DURATION_S * 1000) {
    const done = await cluster.pool
      .query(`SELECT job, window_key FROM leasejob.windows WHERE job = ANY($1) AND completed_at IS NOT NULL`, [names])
      .catch(() => undefined);
    for (const row of done?.rows ?? []) jobs.find((j) => j.name === row.job).completed.add(row.window_key);
    for (const job of jobs) {
      while (job.completed.has(windowOf(job, job.current).key)) job.current += 1;
      if (Date.now() < job.nextLaunchAt) continue;
      if (fleet.live((r) => r.phase === 'chaos').length >= MAX_LIVE) break;
      if (fleet.live((r) => r.job === job.name && r.phase === 'chaos').length >= job.target) continue;
      const index = job.current > 0 && rng.chance(0.08) ? rng.int(0, job.current - 1) : job.current;
      // --on-busy replace (issue 17): now and then a scheduled job's next occurrence comes while
      // the current one runs, and asks its holder to stop; the replaced window is run again.
      const replacing = job.mode === 'schedule' && index === job.current && rng.chance(0.15);
      if (replacing) launchFor(job, rng.pick(hostWeights), 'replace', index + 1);
      else launchFor(job, rng.pick(hostWeights), undefined, index);
      job.target = rng.chance(0.3) ? 3 : 2;
      // Rate-limited: every runner and child is a Node process starting on 2 cores.
      job.nextLaunchAt = Date.now() + rng.int(500, 1_200);
    }
    await sleep(200);
  }
  const faultsEnd = Date.now();
  for (const t of timers) clearTimeout(t);
  const unfired = plan.filter((f) => f.at > faultsEnd - t0);
  for (const f of unfired) injector.fire(f); // late on a busy machine: still each kind once
  await injector.settle();
  hostsCtl.healAll();
  hostsCtl.resetClocks();
  await ops.stop();
  live.operators.delete(ops);
  await life.stop();
  live.operators.delete(life);
  for (const a of actors44) {
    await a.stop();
    live.operators.delete(a);
  }
  for (const f of injector.done.filter((x) => x.aimed)) {
    const seq = ops.actions.find((a) => a.startedAt <= f.aimed.completedAt && a.endedAt >= f.aimed.completedAt);
    const last = seq?.output.trim().split('\n').at(-1)?.slice(0, 300) ?? '';
    say(
      `round ${round}: the aimed sequence (${seq?.kind ?? '?'} ${seq?.job ?? ''}) exited ${seq?.code ?? '?'}: ${last}`,
    );
  }

  // Drain: no new runners; everything alive ends by itself (waiters time out after 20 s).
  say(`round ${round}: faults over; draining ${fleet.live().length} runners`);
  const stragglers = await fleet.waitAll(DRAIN_LIMIT_MS);
  for (const r of stragglers) {
    r.diagnosis = diagnose(r.pid);
    r.silentS = Math.round((Date.now() - (r.lines.at(-1)?.t ?? r.startedAt)) / 1000);
    killRun(r);
  }
  await Promise.all(stragglers.map((r) => r.exited));
  const drainEnd = Date.now();

  // Settle: every window a runner was started for gets clean reruns until it is completed.
  const targeted = new Map();
  for (const r of fleet.runs) targeted.set(`${r.job}\u0000${r.window}`, r);
  const allJobs = [...jobs, crowdJob];
  const isCompleted = async (job, key) =>
    (
      await cluster.pool.query(
        'SELECT 1 FROM leasejob.windows WHERE job = $1 AND window_key = $2 AND completed_at IS NOT NULL',
        [job, key],
      )
    ).rowCount === 1;
  await Promise.all(
    allJobs.map(async (job) => {
      const indexes = [...new Set(fleet.runs.filter((r) => r.job === job.name).map((r) => r.windowIndex))].sort(
        (a, b) => a - b,
      );
      for (const index of indexes) {
        for (let attempt = 0; attempt < SETTLE_ATTEMPTS; attempt += 1) {
          if (await isCompleted(job.name, windowOf(job, index).key)) break;
          const { units } = fleet.runs.find((r) => r.job === job.name && r.windowIndex === index);
          const run = fleet.launch({
            job,
            windowIndex: index,
            host: hostsCtl.byName('direct'),
            onBusy: 'wait',
            units,
            delayMs: 50,
            phase: 'settle',
            waitTimeout: '30s',
          });
          await run.exited;
        }
      }
    }),
  );
  const settleEnd = Date.now();
  fleet.stop();

  const jobNames = allJobs.map((j) => j.name);
  const data = await loadRound(cluster.pool, 'leasejob', jobNames);
  const effects = readFileSync(effectsFile, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  const check = checkRound({
    data,
    runs: fleet.runs,
    faults: injector.done,
    jobs: jobNames,
    unitsOf: (job, window) => fleet.runs.find((r) => r.job === job && r.window === window).units,
    crowdWindows,
    stragglers,
    clockOffsetMs: cluster.clockOffsetMs + dbClockAheadMs,
    effects,
    parentDeathSignal,
  });
  const opsCheck = await checkOperators(
    cluster.pool,
    ops.jobs.map((j) => j.name),
    cluster.schema,
  );
  for (const [name, list] of Object.entries(opsCheck.violations)) check.invariants.set(name, list);
  const lossy = injector.done
    .filter((f) => LOSSY_KINDS.has(f.kind) && f.injected)
    .map((f) => [f.startedAt ?? f.at, f.upAt ?? Date.now()]);
  for (const [name, list] of Object.entries(life.judge(lossy))) {
    if (!PENDING_INVARIANTS.has(name)) check.invariants.set(name, list);
    else if (list.length > 0)
      say(`round ${round}: ${name} (pending its fix, not counted): ${list.length}x, e.g. ${list[0]}`);
  }
  for (const a of actors44) for (const [name, list] of Object.entries(a.judge(lossy))) check.invariants.set(name, list);
  check.figures.scrapeFlood = floodFigures(flood.actions);
  check.figures.claimedAs = opsCheck.claimedAs;
  const checkEnd = Date.now();
  const violations = [...check.invariants.values()].reduce((n, l) => n + l.length, 0);
  if (violations > 0 || args.keep) dumpRuns(path.join(workDir, `round${round}-runs`), fleet.runs, injector.done);
  say(`round ${round}: ${fleet.runs.length} runs, ${targeted.size} windows, ${violations} violation(s)`);
  return {
    round,
    runs: fleet.runs,
    operators: [...ops.actions, ...life.actions, ...actors44.flatMap((a) => a.actions)],
    faults: injector.done,
    check,
    windows: targeted.size,
    units: data.units.length,
    times: {
      faultsS: Math.round((faultsEnd - t0) / 1000),
      drainS: Math.round((drainEnd - faultsEnd) / 1000),
      settleS: Math.round((settleEnd - drainEnd) / 1000),
      checkS: Math.round((checkEnd - settleEnd) / 1000),
    },
  };
}

/** What a lossy fault did, for the progress log: its times from `at` (history lost from there). */
function lossLine(rec) {
  const t = (x) => (x === undefined ? '-' : `+${x - rec.at} ms`);
  const aim = rec.aimed
    ? `; aimed at ${rec.aimed.job} ${rec.aimed.window} (${rec.aimed.action}), stalled ${rec.at - rec.aimed.completedAt} ms after its completion was seen`
    : rec.note
      ? `; ${rec.note}`
      : '';
  const lost = rec.lostEvents === undefined ? '' : `, at least ${rec.lostEvents} events lost`;
  return `history lost from ${new Date(rec.at).toISOString().slice(11, 23)}, backed up ${t(rec.backedUpAt)}, down ${t(rec.downAt)}, up ${t(rec.upAt)}${lost}${aim}`;
}

/** Where a hung process is stuck, from /proc: each thread's state and kernel wait channel. */
function diagnose(pid) {
  const read = (p) => {
    try {
      return readFileSync(p, 'utf8').trim();
    } catch {
      return '?';
    }
  };
  try {
    const threads = readdirSync(`/proc/${pid}/task`).map(
      (tid) =>
        `${read(`/proc/${pid}/task/${tid}/comm`)}:${procStat(pid, tid)?.state ?? '?'}:${read(`/proc/${pid}/task/${tid}/wchan`)}`,
    );
    const fds = readdirSync(`/proc/${pid}/fd`).map((fd) => {
      try {
        return readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        return '?';
      }
    });
    return `threads ${threads.join(' ')}; fds ${fds.filter((f) => f.startsWith('socket')).length} sockets, ${fds.filter((f) => f.startsWith('pipe')).length} pipes`;
  } catch (err) {
    return `no /proc entry (${err.code})`;
  }
}

function dumpRuns(dir, runs, faults) {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const r of runs) {
    const { lines, exited, stderr, ...meta } = r;
    writeFileSync(path.join(dir, `run-${String(r.id).padStart(4, '0')}.log`), `${JSON.stringify(meta)}\n${stderr}`);
  }
  writeFileSync(path.join(dir, 'faults.json'), JSON.stringify(faults, null, 2));
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`chaos: harness error: ${err.stack ?? err}\n`);
    process.exit(2);
  },
);
