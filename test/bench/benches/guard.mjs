// What the guard between leasejob and the child (src/lease/guard.ts) costs each run. Start-up:
// a `true` started through the guard as leasejob starts it (the guard spawned with its control
// socket, told to start the command, its end reported back), against `true` spawned directly;
// the difference is what the guard adds before and after a child. Memory: the guard's VmHWM
// and PSS (/proc/<pid>/smaps_rollup: its share of pages it maps with others, leasejob's Node
// binary included) while a child runs. With LEASEJOB_BENCH_SINGLE_FILE=<built single file> the
// same for the single file started as the guard; with LEASEJOB_BENCH_BASELINE_ROOT=<a built
// checkout without the guard> whole `leasejob run -- true` runs of both, interleaved.
import { readFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { NODE, ROOT, interleave, procStatus, sleep, timed } from '../lib/proc.mjs';

const GUARD = path.join(ROOT, 'dist', 'guard.cjs');

/** The guard's command: the npm package's, or the single file's. */
const guardCommand = (singleFile) =>
  singleFile ? { file: singleFile, args: [], env: { LEASEJOB_GUARD: '1' } } : { file: NODE, args: [GUARD], env: {} };

/**
 * Start `command` through the guard; resolves with the time to its reported end, and (with
 * `sample`) the guard's memory read while the command still runs.
 */
function throughGuard(guard, file, args, sample) {
  const t0 = performance.now();
  const g = spawn(guard.file, guard.args, {
    env: guard.env,
    stdio: ['ignore', 'ignore', 'inherit', 'pipe'],
    detached: true,
  });
  const control = g.stdio[3];
  control.on('error', () => {}); // the guard may be gone before our last word (EPIPE)
  control.setEncoding('utf8');
  let buffered = '';
  return new Promise((resolve) => {
    let memory;
    control.on('data', async (chunk) => {
      buffered += chunk;
      for (let i = buffered.indexOf('\n'); i >= 0; i = buffered.indexOf('\n')) {
        const m = JSON.parse(buffered.slice(0, i));
        buffered = buffered.slice(i + 1);
        if ('pid' in m && sample) memory = await sampleMemory(g.pid);
        if ('exit' in m) {
          const ms = performance.now() - t0;
          control.end(`${JSON.stringify({ done: true })}\n`);
          g.once('exit', () => resolve({ ms, code: m.exit ?? 1, memory }));
        }
        if ('spawnError' in m) resolve({ ms: NaN, code: 127 });
      }
    });
    control.write(
      `${JSON.stringify({ start: { file, args, env: { PATH: process.env.PATH }, cwd: ROOT, stopAtMs: null, graceMs: 0 } })}\n`,
    );
  });
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
  const n = ctx.n(30, 5);
  const singleFile = process.env.LEASEJOB_BENCH_SINGLE_FILE;
  const contenders = [
    { name: 'true through the guard (npm)', run: () => throughGuard(guardCommand(), 'true', []) },
    { name: 'true spawned directly', run: () => direct('true', []) },
    ...(singleFile
      ? [
          {
            name: 'true through the guard (single file)',
            run: () => throughGuard(guardCommand(singleFile), 'true', []),
          },
        ]
      : []),
  ];
  const { samples, failed } = await interleave(contenders, n, (c) => c.run());
  for (const f of failed) ctx.report.note(`guard: ${f.c.name} exit ${f.r.code}`);
  for (const c of contenders.filter((c) => c.name !== 'true spawned directly'))
    ctx.report.add({
      bench: 'guard',
      name: c.name,
      unit: 'ms',
      samples: samples[c.name],
      baseline: { name: 'true spawned directly', samples: samples['true spawned directly'] },
    });

  for (const [name, guard] of [
    ['npm', guardCommand()],
    ...(singleFile ? [['single file', guardCommand(singleFile)]] : []),
  ]) {
    const hwm = [];
    const pss = [];
    for (let i = 0; i < ctx.n(6, 2); i++) {
      const r = await throughGuard(guard, 'sleep', ['0.5'], true);
      hwm.push((r.memory?.hwmKb ?? NaN) / 1024);
      pss.push((r.memory?.pssKb ?? NaN) / 1024);
    }
    ctx.report.add({ bench: 'guard', name: `guard VmHWM (${name})`, unit: 'MB', samples: hwm });
    ctx.report.add({ bench: 'guard', name: `guard PSS (${name})`, unit: 'MB', samples: pss });
  }

  const baselineRoot = process.env.LEASEJOB_BENCH_BASELINE_ROOT;
  if (!baselineRoot) {
    ctx.report.note(
      'guard: whole runs against a checkout without the guard skipped (LEASEJOB_BENCH_BASELINE_ROOT unset)',
    );
    return;
  }
  const job = ctx.uid('guard');
  let w = 0;
  const runs = [
    { name: 'run -- true (guard)', bin: path.join(ROOT, 'bin', 'leasejob.js') },
    { name: 'run -- true (no guard: baseline checkout)', bin: path.join(baselineRoot, 'bin', 'leasejob.js') },
  ];
  const whole = await interleave(runs, n, (c) =>
    timed(NODE, [c.bin, 'run', '--schema', ctx.schema, '--name', job, '--window', `w${++w}`, '--', 'true'], {
      env: ctx.env,
    }),
  );
  for (const f of whole.failed) ctx.report.note(`guard: ${f.c.name} exit ${f.r.code}: ${f.r.stderr.slice(-200)}`);
  ctx.report.add({
    bench: 'guard',
    name: runs[0].name,
    unit: 'ms',
    samples: whole.samples[runs[0].name],
    baseline: { name: runs[1].name, samples: whole.samples[runs[1].name] },
  });
}
