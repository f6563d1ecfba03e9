// What the guard between leasejob and the child costs each run, for each guard: the native one
// (dist/guard/linux-<arch>/leasejob-guard, src/native/guard.c) and the Node one (dist/guard.cjs;
// with LEASEJOB_BENCH_SINGLE_FILE=<built single file> also the single file started as the guard).
// Start-up: a `true` started through the guard as leasejob starts it (the guard spawned with its
// control socket, told to start the command, its end reported back), against `true` spawned
// directly; the difference is what the guard adds before and after a child. Target for the
// native guard: at most 3 ms more. Memory: the guard's VmHWM and PSS
// (/proc/<pid>/smaps_rollup: its share of pages it maps with others) while a child runs;
// target for the native guard: at most 1 MB. Whole runs: `leasejob run -- true` with each
// guard against the floor of a leased run (fixtures/floor.cjs: Node, one connection, acquire,
// the child, finish), interleaved; with LEASEJOB_BENCH_BASELINE_ROOT=<a built checkout> that
// checkout's run too. A guard that cannot be measured (not built, a failed start) fails the bench.
import { existsSync, readFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { FLOOR, NODE, ROOT, interleave, procStatus, sleep, timed } from '../lib/proc.mjs';
import { summarize } from '../lib/stats.mjs';

const NATIVE = path.join(ROOT, 'dist', 'guard', `linux-${process.arch}`, 'leasejob-guard');
const NODE_GUARD = path.join(ROOT, 'dist', 'guard.cjs');

/** The guards measured: native, Node (npm), and the single file as the guard when given. */
function guards() {
  const singleFile = process.env.LEASEJOB_BENCH_SINGLE_FILE;
  return [
    { name: 'native', file: NATIVE, args: [], env: {} },
    { name: 'node (npm)', file: NODE, args: [NODE_GUARD], env: {} },
    ...(singleFile ? [{ name: 'node (single file)', file: singleFile, args: [], env: { LEASEJOB_GUARD: '1' } }] : []),
  ];
}

/** The protocol's start (src/lease/guard-protocol.ts): these values need no escaping. */
const startLines = (file, args) =>
  [
    `file ${file}`,
    ...args.map((a) => `arg ${a}`),
    `env PATH=${process.env.PATH}`,
    `cwd ${ROOT}`,
    'grace 0',
    'stop -',
    'start',
  ]
    .map((l) => `${l}\n`)
    .join('');

/**
 * Start `command` through the guard; resolves with the time to its reported end, and (with
 * `sample`) the guard's memory read while the command still runs.
 */
function throughGuard(guard, file, args, sample, { cpu = false } = {}) {
  const t0 = performance.now();
  // With `cpu`: under bash, which passes fd 3 on and prints the CPU its children used (`times`).
  const [cmd, cmdArgs] = cpu
    ? ['bash', ['-c', '"$@"; times', 'bash', guard.file, ...guard.args]]
    : [guard.file, guard.args];
  const g = spawn(cmd, cmdArgs, {
    env: cpu ? { ...guard.env, PATH: process.env.PATH } : guard.env,
    stdio: ['ignore', cpu ? 'pipe' : 'ignore', 'inherit', 'pipe'],
    detached: true,
  });
  let out = '';
  g.stdout?.setEncoding('utf8').on('data', (t) => (out += t));
  const control = g.stdio[3];
  control.on('error', () => {}); // the guard may be gone before our last word (EPIPE)
  control.setEncoding('latin1');
  let buffered = '';
  return new Promise((resolve) => {
    let memory;
    g.once('error', (err) => resolve({ ms: NaN, code: 127, error: err.message }));
    control.on('data', async (chunk) => {
      buffered += chunk;
      for (let i = buffered.indexOf('\n'); i >= 0; i = buffered.indexOf('\n')) {
        const [word, value] = buffered.slice(0, i).split(' ');
        buffered = buffered.slice(i + 1);
        if (word === 'pid' && sample) memory = await sampleMemory(g.pid);
        if (word === 'exit' || word === 'signal') {
          const ms = performance.now() - t0;
          control.end('done\n');
          const code = word === 'exit' ? Number(value) : 128 + Number(value);
          g.once('close', () => resolve({ ms: cpu ? cpuMs(out) : ms, code, memory }));
        }
        if (word === 'spawn-error') resolve({ ms: NaN, code: 127, error: value });
      }
    });
    control.write(startLines(file, args));
  });
}

/** bash's `times`: the children's user + system line, in ms. */
function cpuMs(text) {
  const line = text.trim().split('\n').at(-1) ?? '';
  const secs = [...line.matchAll(/(\d+)m([\d.]+)s/g)].map((m) => Number(m[1]) * 60 + Number(m[2]));
  return secs.length === 2 ? (secs[0] + secs[1]) * 1000 : NaN;
}

/** The guard's VmHWM and PSS (kB) once it has settled with its child running. */
async function sampleMemory(pid) {
  await sleep(100);
  const st = procStatus(pid);
  let pss;
  try {
    pss = Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))?.[1]);
  } catch {
    pss = NaN;
  }
  return { hwmKb: st?.VmHWM ?? NaN, pssKb: pss };
}

const direct = (file, args) => timed(file, args, { env: { PATH: process.env.PATH } });

export async function run(ctx) {
  if (!existsSync(NATIVE))
    throw new Error(`${NATIVE} is not built (npm run build needs musl-gcc): the native guard cannot be measured`);
  const n = ctx.n(30, 5);
  const problems = [];
  await startUp(ctx, n, problems);
  await startUpCpu(ctx, n, problems);
  await memory(ctx, problems);
  await wholeRuns(ctx, n, problems);
  if (problems.length > 0) throw new Error(`could not measure: ${problems.join('; ')}`);
}

async function startUp(ctx, n, problems) {
  const contenders = [
    ...guards().map((g) => ({ name: `true through the ${g.name} guard`, run: () => throughGuard(g, '/bin/true', []) })),
    { name: 'true spawned directly', run: () => direct('/bin/true', []) },
  ];
  const { samples, failed } = await interleave(contenders, n, (c) => c.run());
  for (const f of failed) problems.push(`${f.c.name}: exit ${f.r.code}${f.r.error ? ` (${f.r.error})` : ''}`);
  const base = samples['true spawned directly'];
  for (const c of contenders.slice(0, -1)) {
    const native = c.name.includes('native');
    const over = summarize(samples[c.name]).median - summarize(base).median;
    ctx.report.add({
      bench: 'guard',
      name: c.name,
      unit: 'ms',
      samples: samples[c.name],
      baseline: { name: 'true spawned directly', samples: base },
      ...(native ? { target: { text: '<= 3 ms over direct', ok: over <= 3 } } : {}),
      note: `${over.toFixed(2)} ms over spawning it directly (medians)`,
    });
  }
}

/**
 * The same in CPU time (user + system of the guard and its child, bash's `times`), which a
 * loaded machine does not inflate as it does wall time: the guard's own work per child.
 */
async function startUpCpu(ctx, n, problems) {
  const directCpu = async () => {
    const r = await timed('bash', ['-c', '/bin/true; times'], { env: { PATH: process.env.PATH }, stdout: true });
    return { ms: cpuMs(r.stdout), code: r.code };
  };
  const contenders = [
    ...guards().map((g) => ({
      name: `CPU of true through the ${g.name} guard`,
      run: () => throughGuard(g, '/bin/true', [], false, { cpu: true }),
    })),
    { name: 'CPU of true spawned directly', run: directCpu },
  ];
  const { samples, failed } = await interleave(contenders, n, (c) => c.run());
  for (const f of failed) problems.push(`${f.c.name}: exit ${f.r.code}`);
  const base = samples['CPU of true spawned directly'];
  for (const c of contenders.slice(0, -1)) {
    const over = summarize(samples[c.name]).median - summarize(base).median;
    ctx.report.add({
      bench: 'guard',
      name: c.name,
      unit: 'ms',
      samples: samples[c.name],
      baseline: { name: 'CPU of true spawned directly', samples: base },
      ...(c.name.includes('native') ? { target: { text: '<= 3 ms over direct', ok: over <= 3 } } : {}),
      note: `${over.toFixed(2)} ms of CPU over spawning it directly (medians; user + system, bash's times)`,
    });
  }
}

async function memory(ctx, problems) {
  for (const g of guards()) {
    const hwm = [];
    const pss = [];
    for (let i = 0; i < ctx.n(6, 2); i++) {
      const r = await throughGuard(g, '/bin/sleep', ['0.5'], true);
      if (r.code !== 0) problems.push(`memory of the ${g.name} guard: exit ${r.code}`);
      hwm.push((r.memory?.hwmKb ?? NaN) / 1024);
      pss.push((r.memory?.pssKb ?? NaN) / 1024);
    }
    const native = g.name === 'native';
    const rssTarget = native ? { target: { text: '<= 1 MB', ok: hwm.every((x) => x <= 1) } } : {};
    ctx.report.add({ bench: 'guard', name: `guard VmHWM (${g.name})`, unit: 'MB', samples: hwm, ...rssTarget });
    ctx.report.add({ bench: 'guard', name: `guard PSS (${g.name})`, unit: 'MB', samples: pss });
  }
}

/** `run -- true` with each guard, against the floor of a leased run, interleaved. */
async function wholeRuns(ctx, n, problems) {
  const job = ctx.uid('guard');
  let w = 0;
  const bin = path.join(ROOT, 'bin', 'leasejob.js');
  const baselineRoot = process.env.LEASEJOB_BENCH_BASELINE_ROOT;
  const runs = [
    { name: 'run -- true, native guard', bin, env: ctx.env },
    { name: 'run -- true, node guard', bin, env: { ...ctx.env, LEASEJOB_NATIVE_GUARD: 'off' } },
    { name: 'floor.cjs (Node, connect, acquire, child, finish)', floor: true, env: ctx.env },
    ...(baselineRoot
      ? [{ name: `run -- true, ${baselineRoot}`, bin: path.join(baselineRoot, 'bin', 'leasejob.js'), env: ctx.env }]
      : []),
  ];
  const whole = await interleave(runs, n, (c) =>
    c.floor
      ? timed(NODE, [FLOOR, ctx.schema, job, `w${++w}`, '--', 'true'], { env: c.env })
      : timed(NODE, [c.bin, 'run', '--schema', ctx.schema, '--name', job, '--window', `w${++w}`, '--', 'true'], {
          env: c.env,
        }),
  );
  for (const f of whole.failed) problems.push(`${f.c.name}: exit ${f.r.code}: ${f.r.stderr.slice(-200)}`);
  const floor = whole.samples[runs[2].name];
  for (const c of runs.filter((r) => !r.floor))
    ctx.report.add({
      bench: 'guard',
      name: c.name,
      unit: 'ms',
      samples: whole.samples[c.name],
      baseline: { name: 'floor.cjs', samples: floor },
      ...(c.name.includes('native')
        ? {
            target: {
              text: '<= 1.05x the floor',
              ok: summarize(whole.samples[c.name]).median <= 1.05 * summarize(floor).median,
            },
          }
        : {}),
    });
}
