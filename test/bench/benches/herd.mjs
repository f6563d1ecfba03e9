// Thundering herd: N real CLI processes started at once on one job and one window.
//
// The winner's child appends "<wall ns> <pid> <runner pid>" to a file and then waits for a
// release file, so it is still running while every other contender decides (each of them must
// see a live owner and leave: --on-busy skip). Once all non-winners have exited, the bench
// releases the child and the winner completes the window.
// Verified per trial: exactly one child started, every process exited 0, N-1 busy-skip events.
// Figures per trial:
//   - last exit from spawn: last non-winner exit minus the moment the first process was spawned;
//   - last exit after first acquisition: last non-winner exit minus the winner's acquired_at
//     (database clock = host clock here: same machine);
//   - slowest non-winner from its first log line (modules loaded) to its exit: the lease work
//     alone, without the CPU-bound node start-up that N processes on 2 cores queue behind;
// Baselines, interleaved with the herd (order rotated per trial):
//   - floor herd: N copies of fixtures/floor.cjs (Node, one raw connection, leasejob's acquire(),
//     the child for the winner, finish(); no driver, no logger, no busy-skip event) on one
//     window, measured the same way: the least any Node runner with a PostgreSQL lease pays;
//   - N `node -e 0` started at once, last exit from spawn: what N bare Node start-ups cost on
//     this machine, before any module or lease work.
// And the CPU one contender costs (user + system, children included), one at a time facing a
// live owner, as a herd's contenders do: leasejob against the floor against `node -e 0`. On 2
// cores a herd of N takes at least N times that over 2.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  BIN,
  FLOOR,
  NODE,
  ancestorIn,
  cpuTimed,
  fileLines,
  interleave,
  logLines,
  parseStamp,
  sleep,
  stampCmd,
  start,
  stopProcess,
  waitFor,
} from '../lib/proc.mjs';
import { rotate, summarize } from '../lib/stats.mjs';

/** The herd target, for a row's samples. */
const within1500 = (xs) => ({ text: '<= 1500 ms', ok: xs.every((x) => x <= 1500) });
const spawnNote = (acc) =>
  `last exit from spawn ${acc.fromSpawn.map((x) => Math.round(x)).join(', ')} ms` +
  (acc.bad.length ? `; problems: ${acc.bad.slice(0, 2).join(' | ')}` : '');

/**
 * A herd whose trials could not be measured (a timed-out trial, a failed contender, no child or
 * two) gives no figure: its problems, and the bench then fails (npm run bench exits non-zero).
 */
function measured(acc, what, problems) {
  if (acc.bad.length === 0) return true;
  problems.push(`${what}: ${acc.bad.slice(0, 3).join(' | ')}`);
  return false;
}

export async function run(ctx) {
  const problems = [];
  await cpuPerContender(ctx);
  const trials = ctx.n(3, 1);
  for (const size of ctx.herdSizes) {
    const herd = newAcc();
    const floor = newAcc();
    const base = { fromSpawn: [] };
    // The largest herd also through PgBouncer, when there is one: no backend started per contender.
    const pooledEnv = size === Math.max(...ctx.herdSizes) ? ctx.pgbouncer?.env : undefined;
    const herdPooled = newAcc();
    const floorPooled = newAcc();
    const trialsOfEach = [
      () => herdTrial(ctx, size, herd, leasejobCmd),
      () => herdTrial(ctx, size, floor, floorCmd, { leasejobFigures: false }),
      async () => base.fromSpawn.push(await baselineTrial(ctx, size)),
      ...(pooledEnv
        ? [
            () => herdTrial(ctx, size, herdPooled, leasejobCmd, { env: pooledEnv }),
            () => herdTrial(ctx, size, floorPooled, floorCmd, { leasejobFigures: false, env: pooledEnv }),
          ]
        : []),
    ];
    for (let t = 0; t < trials; t++) {
      // Rotate which goes first, so none always runs right after another's tail.
      for (const trial of rotate(trialsOfEach, t)) {
        await trial();
        await sleep(300); // let the last exits settle
      }
    }
    if (pooledEnv) {
      for (const [name, acc] of [
        [`N=${size} through pgbouncer: last non-winner exit after 1st acquisition`, herdPooled],
        [`N=${size} through pgbouncer: floor.cjs herd, same measure`, floorPooled],
      ]) {
        if (!measured(acc, name, problems)) continue;
        ctx.report.add({
          bench: 'herd',
          name,
          unit: 'ms',
          samples: acc.fromAcquire,
          target: within1500(acc.fromAcquire),
          note: `children per trial: ${acc.children.join(', ')}; ${spawnNote(acc)}`,
        });
      }
    }
    const okOne = herd.children.every((c) => c === 1);
    const herdOk = measured(herd, `N=${size} leasejob herd`, problems);
    const floorOk = measured(floor, `N=${size} floor.cjs herd`, problems);
    if (!herdOk || !floorOk) continue;
    ctx.report.add({
      bench: 'herd',
      name: `N=${size}: last exit from spawn`,
      unit: 'ms',
      samples: herd.fromSpawn,
      baseline: { name: `${size}x node -e 0`, samples: base.fromSpawn },
    });
    ctx.report.add({
      bench: 'herd',
      name: `N=${size}: last non-winner exit after 1st acquisition`,
      unit: 'ms',
      samples: herd.fromAcquire,
      baseline: { name: `${size}x floor.cjs, same measure`, samples: floor.fromAcquire },
      ...(size >= 100 ? { target: within1500(herd.fromAcquire) } : {}),
      note: `floor herd: ${floor.children.join(', ')} children per trial; ${spawnNote(floor)}`,
    });
    // The floor held to the same target: whether any Node runner could meet it here.
    ctx.report.add({
      bench: 'herd',
      name: `N=${size}: floor.cjs herd, same measure`,
      unit: 'ms',
      samples: floor.fromAcquire,
      ...(size >= 100 ? { target: within1500(floor.fromAcquire) } : {}),
    });
    ctx.report.add({
      bench: 'herd',
      name: `N=${size}: slowest non-winner, 1st log line -> exit`,
      unit: 'ms',
      samples: herd.decideMax,
      note: `the lease work alone (connect, acquire, busy-skip event, exit) once the process has loaded; median contender per trial: ${herd.decideMedian.map((x) => Math.round(x)).join(', ')} ms`,
    });
    ctx.report.add({
      bench: 'herd',
      name: `N=${size}: children started per trial`,
      unit: 'count',
      samples: herd.children,
      target: { text: 'exactly 1', ok: okOne && herd.children.length === trials },
      note:
        `busy-skip events per trial: ${herd.skips.join(', ')} (expected ${size - 1}); median exit from spawn per trial: ${herd.medianFromSpawn.map((x) => Math.round(x)).join(', ')} ms` +
        (herd.bad.length ? `; problems: ${herd.bad.slice(0, 3).join(' | ')}` : ''),
    });
  }
  if (problems.length > 0) throw new Error(`could not measure: ${problems.join('; ')}`);
}

function newAcc() {
  return {
    fromSpawn: [],
    fromAcquire: [],
    medianFromSpawn: [],
    decideMax: [],
    decideMedian: [],
    children: [],
    skips: [],
    bad: [],
  };
}

const leasejobCmd = (ctx, job, child) => [
  NODE,
  [BIN, 'run', '--name', job, '--schema', ctx.schema, '--window', 'w1', '--', ...child],
];
const floorCmd = (ctx, job, child) => [NODE, [FLOOR, ctx.schema, job, 'w1', '--', ...child]];

/**
 * One herd of `size` on a fresh job. `leasejobFigures: false` (the floor, which logs nothing and
 * records no events): only fromSpawn, fromAcquire, children and bad, no per-contender log-line
 * figures and no busy-skip count. `env`: the contenders' (another database URL).
 */
async function herdTrial(ctx, size, acc, command, { leasejobFigures = true, env = ctx.env } = {}) {
  const job = ctx.uid(`herd${size}`);
  const stampFile = path.join(ctx.tmp, `${job}.stamps`);
  const releaseFile = path.join(ctx.tmp, `${job}.release`);
  const child = ['sh', '-c', `${stampCmd(stampFile)}; while [ ! -e '${releaseFile}' ]; do sleep 0.02; done`];
  const [file, args] = command(ctx, job, child);
  const spawnWall = Date.now();
  const procs = [];
  for (let i = 0; i < size; i++) procs.push(start(file, args, { env }));
  // Everyone but the winner exits on its own; the winner is the runner above the child that
  // stamped: its parent (the floor) or its guard's parent (leasejob), read while the child waits.
  const exits = new Map();
  for (const p of procs) void p.done.then((r) => exits.set(p.pid, r));
  const deadline = performance.now() + 120_000;
  const pids = new Set(procs.map((p) => p.pid));
  let winnerPid;
  for (;;) {
    const stamps = fileLines(stampFile).map(parseStamp);
    winnerPid ??= stamps[0] === undefined ? undefined : ancestorIn(stamps[0].pid, pids);
    if (stamps[0] !== undefined && winnerPid === undefined) {
      acc.bad.push(`no contender is an ancestor of the child ${stamps[0].pid}: the winner cannot be named`);
      break;
    }
    const nonWinnersDone = winnerPid !== undefined && procs.every((p) => p.pid === winnerPid || exits.has(p.pid));
    // If no child ever starts (all failed), stop when everyone has exited.
    if (nonWinnersDone || exits.size === size) break;
    if (performance.now() > deadline) {
      acc.bad.push(`timed out: ${exits.size}/${size} exited, winner ${winnerPid}`);
      break;
    }
    await sleep(10);
  }
  writeFileSync(releaseFile, '');
  const results = await Promise.all(procs.map((p) => p.done));
  const stamps = fileLines(stampFile).map(parseStamp);
  acc.children.push(stamps.length);
  if (stamps.length !== 1) acc.bad.push(`${stamps.length} children started, not exactly 1`);
  const nonWinners = procs
    .filter((p) => p.pid !== winnerPid)
    .map((p) => exits.get(p.pid))
    .filter(Boolean);
  const bad = results.filter((r) => r.code !== 0);
  if (bad.length)
    acc.bad.push(
      `${bad.length} exited non-zero, e.g. ${bad[0].code}: ${bad[0].stderr.split('\n').filter(Boolean).slice(-1)[0]?.slice(0, 200)}`,
    );
  const lastExit = Math.max(...nonWinners.map((r) => r.wallEnd));
  acc.fromSpawn.push(lastExit - spawnWall);
  const lease = await ctx.admin.query(`SELECT acquired_at FROM "${ctx.schema}".leases WHERE name = $1`, [job]);
  const acquiredAt = lease.rows[0]?.acquired_at?.getTime();
  if (acquiredAt !== undefined) acc.fromAcquire.push(lastExit - acquiredAt);
  if (!leasejobFigures) return;
  acc.medianFromSpawn.push(summarize(nonWinners.map((r) => r.wallEnd - spawnWall)).median);
  // Per contender, from its first log line (modules loaded, argv parsed) to its exit.
  const decide = nonWinners.map((r) => {
    const first = logLines(r.stderr)[0];
    return first ? r.wallEnd - Date.parse(first.time) : NaN;
  });
  const ds = summarize(decide);
  acc.decideMax.push(ds.max);
  acc.decideMedian.push(ds.median);
  const skips = await ctx.admin.query(
    `SELECT count(*)::int AS n FROM "${ctx.schema}".events WHERE job = $1 AND kind = 'busy-skip'`,
    [job],
  );
  acc.skips.push(skips.rows[0].n);
}

async function baselineTrial(ctx, size) {
  const spawnWall = Date.now();
  const procs = [];
  for (let i = 0; i < size; i++) procs.push(start(NODE, ['-e', '0'], { env: ctx.env }));
  const results = await Promise.all(procs.map((p) => p.done));
  return Math.max(...results.map((r) => r.wallEnd)) - spawnWall;
}

async function cpuPerContender(ctx) {
  const n = ctx.n(20, 3);
  const job = ctx.uid('cpu');
  const floorJob = ctx.uid('cpufloor');
  // The owners: each holds its job's window with a child that lives as long as its runner.
  const untilParentGone = ['sh', '-c', 'while kill -0 "$PPID" 2>/dev/null; do sleep 0.1; done'];
  const holders = [
    start(...leasejobCmd(ctx, job, untilParentGone), { env: ctx.env }),
    start(...floorCmd(ctx, floorJob, untilParentGone), { env: ctx.env }),
  ];
  try {
    for (const name of [job, floorJob]) {
      await waitFor(
        async () =>
          (await ctx.admin.query(`SELECT 1 FROM "${ctx.schema}".leases WHERE name = $1 AND expires_at > now()`, [name]))
            .rows.length > 0,
        { timeoutMs: 30_000, what: `${name} held` },
      );
    }
    const contenders = [
      { name: 'leasejob run, busy', cmd: leasejobCmd(ctx, job, ['true']) },
      { name: 'floor.cjs, busy', cmd: floorCmd(ctx, floorJob, ['true']) },
      { name: 'node -e 0', cmd: [NODE, ['-e', '0']] },
    ];
    const { samples, failed } = await interleave(contenders, n, (c) => cpuTimed(...c.cmd, { env: ctx.env }));
    ctx.report.add({
      bench: 'herd',
      name: 'CPU per busy contender (user+sys)',
      unit: 'ms',
      samples: samples['leasejob run, busy'],
      baseline: { name: 'floor.cjs, busy', samples: samples['floor.cjs, busy'] },
      note:
        `one at a time, facing a live owner; node -e 0: ${Math.round(summarize(samples['node -e 0']).median)} ms` +
        (failed.length ? `; ${failed.length} non-zero exits` : ''),
    });
    ctx.report.add({
      bench: 'herd',
      name: 'CPU per busy floor.cjs contender (user+sys)',
      unit: 'ms',
      samples: samples['floor.cjs, busy'],
      baseline: { name: 'node -e 0', samples: samples['node -e 0'] },
    });
  } finally {
    await Promise.all(holders.map((h) => stopProcess(h.child, 5_000)));
  }
}
