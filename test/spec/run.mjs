// `npm run spec`: Quint's simulator over the protocol's specification (docs/spec.md), longer
// than the bounded run of `npm test`: random executions of docs/spec/leasejob.qnt, every
// invariant checked after every step, on the TypeScript backend (offline: Quint's default Rust
// backend downloads its evaluator at run time).
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

export const INVARIANTS = [
  'oneLiveChildPerJob',
  'oneLiveChildPerOccurrence',
  'tokensNeverReissued',
  'fencedWritesInOrder',
  'budgetNeverExceeded',
  'completedNeverStartedAgain',
  'monitoringNeverSilent',
];

const USAGE = `Usage: npm run spec -- [--samples N] [--seed S] [--steps K] [--main MODULE] [--step ACTION]
                        [--out-itf FILE [--traces N]]

Random executions of the protocol's specification (docs/spec/leasejob.qnt) with Quint's
simulator, every invariant checked after every step.

  --samples N     executions (default 2000)
  --seed S        the simulator's seed (printed by every run; random when not given)
  --steps K       steps per execution at most (default 40)
  --main MODULE   a module of docs/spec/checks.qnt: fixed (default; every fix on), noClockFix,
                  noGuardPing, pingWithoutUser, lateStart, markAfterStep, noTokenFloor, dbClockBack
  --step ACTION   the step relation: step (default: every process, clock, fault, operator one
                  transition at a time), mbtStep or mbtStepPg (whole commands, as test/spec replays)
  --out-itf FILE  write the violating execution (or the last ones) as ITF JSON; {seq} in FILE
                  numbers them
  --traces N      with --out-itf: how many executions to write (default 1)
  -h, --help      this text

Exit 0 when no invariant failed, 1 when one did (the execution is printed), 64 on bad usage.`;

const root = fileURLToPath(new URL('../../', import.meta.url));

/** Runs the simulator; returns its exit status, the figures it printed, and its output. */
export function runSpec(o) {
  const args = [
    path.join(root, 'node_modules', '@informalsystems', 'quint', 'dist', 'src', 'cli.js'),
    'run',
    '--backend',
    'typescript',
    '--main',
    o.main ?? 'fixed',
    '--step',
    o.step ?? 'step',
    '--max-samples',
    String(o.samples),
    '--max-steps',
    String(o.steps ?? 40),
    '--invariants',
    ...INVARIANTS,
    ...(o.seed !== undefined && o.seed !== '' ? ['--seed', String(o.seed)] : []),
    ...(o.outItf ? ['--mbt', '--out-itf', o.outItf] : []),
    ...(o.nTraces ? ['--n-traces', String(o.nTraces)] : []),
    '--verbosity',
    String(o.verbosity ?? 2),
    path.join(root, 'docs', 'spec', 'checks.qnt'),
  ];
  const started = process.hrtime.bigint();
  const r = spawnSync(process.execPath, args, { cwd: root, encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
  const ms = Number((process.hrtime.bigint() - started) / 1_000_000n);
  const out = `${r.stdout ?? ''}${r.stderr ?? ''}`;
  const seed = /--seed=(\S+)/.exec(out)?.[1];
  // "(630ms at 5 traces/second)": how many executions the simulator ran before it stopped.
  const rate = /\((\d+)ms at (\d+) traces\/second\)/.exec(out);
  const executions = rate ? Math.max(1, Math.round((Number(rate[1]) * Number(rate[2])) / 1000)) : undefined;
  return { status: r.status, ok: r.status === 0 && /No violation found/.test(out), out, ms, seed, executions };
}

/** The invariants the violating state breaks, as Quint marks them (`❌ name`). */
export function failedInvariants(out) {
  return INVARIANTS.filter((n) => new RegExp(`❌ ${n}\\b`).test(out));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const opts = { samples: '2000', seed: '', steps: '40', main: 'fixed', step: 'step', 'out-itf': '', traces: '1' };
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '-h' || a === '--help') {
      console.log(USAGE);
      process.exit(0);
    }
    const name = a.replace(/^--/, '');
    if (!a.startsWith('--') || !(name in opts) || args[i + 1] === undefined) {
      console.error(`spec: unknown or incomplete option ${a}\n\n${USAGE}`);
      process.exit(64);
    }
    opts[name] = args[++i];
  }
  for (const n of ['samples', 'steps', 'traces'])
    if (!/^\d+$/.test(opts[n])) {
      console.error(`spec: --${n} must be a positive integer, not ${opts[n]}`);
      process.exit(64);
    }
  if (opts['out-itf']) mkdirSync(path.dirname(path.resolve(opts['out-itf'])), { recursive: true });
  const r = runSpec({
    samples: Number(opts.samples),
    steps: Number(opts.steps),
    seed: opts.seed,
    main: opts.main,
    step: opts.step,
    outItf: opts['out-itf'] ? path.resolve(opts['out-itf']) : undefined,
    nTraces: Number(opts.traces),
  });
  if (!r.ok) process.stdout.write(r.out);
  const broken = r.ok ? [] : failedInvariants(r.out);
  console.log(
    `spec ${opts.main}/${opts.step}: ${r.ok ? `no invariant failed in ${opts.samples}` : `AN INVARIANT FAILED (${broken.join(', ') || 'see the execution'}) after about ${r.executions ?? '?'} of ${opts.samples}`} ` +
      `executions of up to ${opts.steps} steps, ${INVARIANTS.length} invariants (${INVARIANTS.join(', ')}) ` +
      `checked after every step, seed ${r.seed ?? (opts.seed || '?')}, ${(r.ms / 1000).toFixed(1)} s`,
  );
  process.exit(r.ok ? 0 : r.status === 0 ? 1 : r.status === 1 ? 1 : (r.status ?? 1));
}
