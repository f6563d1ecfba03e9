// Start cost breakdown ("fast start"): what a `leasejob run` pays before and after the child.
//  1. Whole processes, interleaved: node -e 0 | leasejob --version | run --help | run -- true
//     (the shipped CLI: one esbuild bundle through V8's code cache) | the same without the code
//     cache (LEASEJOB_COMPILE_CACHE=off: a first start) | loading the run path without running
//     (import-time.mjs, the tsc output module by module).
//  2. Phases of a run from its own debug log (spawn -> 'starting' = boot + module load + argv;
//     -> 'lease acquired' = connect + acquire; -> child started/exited; -> released; -> exit).
//  3. Module load: each dependency imported alone in a fresh process (inclusive cost), and the
//     run path imported in order in one process (what each step adds), interleaved.
//  4. A CPU profile of a run, self time attributed to packages.
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { BENCH_DIR, BIN, NODE, interleave, logLines, timed } from '../lib/proc.mjs';
import { rotate, summarize, fmt } from '../lib/stats.mjs';

const IMPORT_TIME = path.join(BENCH_DIR, 'fixtures', 'import-time.mjs');
// What `leasejob run` loads, in the order it loads it (bin -> cli -> commands/run).
const RUN_PATH = ['commander', 'dist/cli/main.js', 'pg', 'pino', 'luxon', 'cron-parser', 'dist/cli/commands/run.js'];
const ISOLATED = [
  'commander',
  'pg',
  'pino',
  'luxon',
  'cron-parser',
  'execa',
  'prom-client',
  'dist/errors.js',
  'dist/cli/main.js',
  'dist/cli/commands/run.js',
];

export async function run(ctx) {
  const n = ctx.n(20, 2);
  const job = ctx.uid('start');
  let w = 0;
  const runArgs = (level = 'debug') => [
    BIN,
    'run',
    '--name',
    job,
    '--schema',
    ctx.schema,
    '--log-level',
    level,
    '--window',
    `w${++w}`,
    '--',
    'true',
  ];

  const contenders = [
    { name: 'node -e 0', args: () => ['-e', '0'] },
    { name: 'leasejob --version', args: () => [BIN, '--version'] },
    { name: 'leasejob run --help', args: () => [BIN, 'run', '--help'], stdout: true },
    { name: 'leasejob run -- true', args: () => runArgs() },
    { name: 'leasejob run -- true, no code cache', args: () => runArgs(), env: { LEASEJOB_COMPILE_CACHE: 'off' } },
    {
      name: 'load run path only',
      args: () => [IMPORT_TIME, 'dist/cli/main.js', 'dist/cli/commands/run.js'],
      stdout: true,
    },
    // What a CA bundle in NODE_EXTRA_CA_CERTS adds to every start (see run.mjs), when one was set.
    ...(ctx.extraCaCerts
      ? [
          {
            name: 'node -e 0, NODE_EXTRA_CA_CERTS set',
            args: () => ['-e', '0'],
            env: { NODE_EXTRA_CA_CERTS: ctx.extraCaCerts },
          },
          {
            name: 'leasejob run -- true, NODE_EXTRA_CA_CERTS set',
            args: () => runArgs(),
            env: { NODE_EXTRA_CA_CERTS: ctx.extraCaCerts },
          },
        ]
      : []),
  ];
  const envOf = (c) => ({ ...ctx.env, ...c.env });
  const { runs, samples, failed } = await interleave(contenders, n, (c) =>
    timed(NODE, c.args(), { env: envOf(c), stdout: c.stdout }),
  );
  const phases = runs['leasejob run -- true'].map(phasesOf);
  const failures = failed.map(({ c, r }) => `${c.name}: exit ${r.code ?? r.signal} ${r.stderr.slice(-200)}`);
  const base = samples['node -e 0'];
  for (const c of contenders.slice(1)) {
    ctx.report.add({
      bench: 'startup',
      name: c.name,
      unit: 'ms',
      samples: samples[c.name],
      baseline: { name: 'node -e 0', samples: base },
    });
  }
  ctx.report.add({
    bench: 'startup',
    name: 'run -- true, code cache',
    unit: 'ms',
    samples: samples['leasejob run -- true'],
    baseline: { name: 'no code cache', samples: samples['leasejob run -- true, no code cache'] },
    note: 'the shipped CLI with its V8 code cache warm, against a first start (LEASEJOB_COMPILE_CACHE=off)',
  });
  if (failures.length)
    ctx.report.note(`startup: ${failures.length} failed processes: ${failures.slice(0, 3).join(' | ')}`);

  // Module load, isolated (each alone in a fresh process) and along the run path.
  const m = ctx.n(10, 2);
  const isolated = Object.fromEntries(ISOLATED.map((s) => [s, []]));
  const isolatedMB = Object.fromEntries(ISOLATED.map((s) => [s, []]));
  const emptyMB = [];
  const chain = Object.fromEntries(RUN_PATH.map((s) => [s, []]));
  const chainTotal = [];
  const boot = [];
  const jobsList = [...ISOLATED.map((s) => ({ kind: 'isolated', spec: s })), { kind: 'chain' }, { kind: 'empty' }];
  for (let i = 0; i < m; i++) {
    for (const j of rotate(jobsList, i)) {
      const specs = j.kind === 'chain' ? RUN_PATH : j.kind === 'empty' ? [] : [j.spec];
      const r = await timed(NODE, [IMPORT_TIME, ...specs], { env: ctx.env, stdout: true });
      if (r.code !== 0) {
        failures.push(`import ${j.spec ?? 'chain'}: ${r.stderr.slice(-200)}`);
        continue;
      }
      const out = JSON.parse(r.stdout);
      if (j.kind === 'isolated') {
        isolated[j.spec].push(out.steps[0].ms);
        isolatedMB[j.spec].push(out.hwmMB);
      } else if (j.kind === 'empty') {
        emptyMB.push(out.hwmMB);
      } else {
        for (const s of out.steps) chain[s.spec].push(s.ms);
        chainTotal.push(out.total);
        boot.push(out.bootMs);
      }
    }
  }

  const profile = await cpuProfile(ctx, runArgs, ctx.n(5, 1));

  // The breakdown, ranked.
  const med = (xs) => summarize(xs).median;
  const runMed = med(samples['leasejob run -- true']);
  const ph = Object.fromEntries(
    Object.keys(phases[0] ?? {}).map((k) => [k, summarize(phases.map((p) => p[k]).filter((x) => x !== undefined))]),
  );
  const startCost = {
    processes: Object.fromEntries(contenders.map((c) => [c.name, summarize(samples[c.name])])),
    runPhases: ph,
    importIsolated: Object.fromEntries(ISOLATED.map((s) => [s, summarize(isolated[s])])),
    importIsolatedPeakMB: Object.fromEntries(ISOLATED.map((s) => [s, summarize(isolatedMB[s])])),
    emptyScriptPeakMB: summarize(emptyMB),
    importRunPath: Object.fromEntries(RUN_PATH.map((s) => [s, summarize(chain[s])])),
    importRunPathTotal: summarize(chainTotal),
    nodeBootBeforeScript: summarize(boot),
    cpuProfileSelfMs: profile,
  };
  ctx.report.extra.startCost = startCost;

  const lines = [];
  lines.push('Start cost of `leasejob run -- true` (medians, ms):');
  lines.push(
    `  whole run ${fmt(runMed)} (no code cache: ${fmt(med(samples['leasejob run -- true, no code cache']))}); node -e 0 ${fmt(med(base))}; --version ${fmt(med(samples['leasejob --version']))}; run --help ${fmt(med(samples['leasejob run --help']))}; load run path only ${fmt(med(samples['load run path only']))}`,
  );
  if (ph.toStarting) {
    lines.push('  phases of a run (from its debug log, ms resolution):');
    const names = {
      toStarting: 'spawn -> first log line (node boot + module load + argv parsing)',
      toAcquired: 'first log line -> "lease acquired" (connect + acquire round trip)',
      toChildStarted: '"lease acquired" -> "child started" (setpriv + spawn)',
      childRan: '"child started" -> "child exited" (true)',
      toReleased: '"child exited" -> "lease released" (finish round trip)',
      toExit: '"lease released" -> process exit (pool.end, exit)',
    };
    for (const [k, label] of Object.entries(names))
      if (ph[k]) lines.push(`    ${fmt(ph[k].median).padStart(7)}  ${label}`);
  }
  lines.push('  module load on the run path (what each import adds, in load order; ranked):');
  const ranked = RUN_PATH.map((s) => [s, med(chain[s])]).sort((a, b) => b[1] - a[1]);
  for (const [s, v] of ranked)
    lines.push(
      `    ${fmt(v).padStart(7)}  ${s}${isolated[s] ? ` (alone in a fresh process: ${fmt(med(isolated[s]))})` : ''}`,
    );
  lines.push(
    `    ${fmt(med(chainTotal)).padStart(7)}  total run-path import; node boot before the first line of a script: ${fmt(med(boot))}`,
  );
  lines.push(
    `  imported alone (fresh process each), ms and peak RSS added over an empty script (${fmt(med(emptyMB), 'MB')} MB):`,
  );
  for (const s of [...ISOLATED].sort((a, b) => med(isolated[b]) - med(isolated[a]))) {
    lines.push(
      `    ${fmt(med(isolated[s])).padStart(7)} ms  +${fmt(med(isolatedMB[s]) - med(emptyMB), 'MB')} MB  ${s}`,
    );
  }
  if (profile) {
    lines.push(
      `  CPU profile of a run, self time by owner (mean of ${profile.runs} runs, ms; a sample goes to the innermost package frame on its stack):`,
    );
    lines.push(
      '    ' +
        profile.ranked
          .slice(0, 12)
          .map(([k, v]) => `${k} ${fmt(v)}`)
          .join(', '),
    );
  }
  ctx.report.extra.startCostText = lines.join('\n');
}

function phasesOf(r) {
  const logs = logLines(r.stderr);
  const at = (msg) => {
    const l = logs.find((x) => x.msg === msg);
    return l ? Date.parse(l.time) : undefined;
  };
  // The first line a run logs comes after module load and argv parsing, before any database
  // work ('starting' at debug in older builds, 'using store' in newer ones).
  const first = logs[0] ? Date.parse(logs[0].time) : undefined;
  const t = {
    starting: first,
    acquired: at('lease acquired'),
    childStarted: at('child started'),
    childExited: at('child exited'),
    released: at('lease released'),
  };
  const d = (a, b) => (a !== undefined && b !== undefined ? b - a : undefined);
  return {
    toStarting: d(r.wallStart, t.starting),
    toAcquired: d(t.starting, t.acquired),
    toChildStarted: d(t.acquired, t.childStarted),
    childRan: d(t.childStarted, t.childExited),
    toReleased: d(t.childExited, t.released),
    toExit: d(t.released, r.wallEnd),
  };
}

/** Run under --cpu-prof and attribute self time to owners (package, node internals, ...). */
async function cpuProfile(ctx, runArgs, runs) {
  const dir = path.join(ctx.tmp, 'cpuprof');
  mkdirSync(dir, { recursive: true });
  for (let i = 0; i < runs; i++) {
    const r = await timed(NODE, ['--cpu-prof', '--cpu-prof-dir', dir, ...runArgs('info')], { env: ctx.env });
    if (r.code !== 0) return undefined;
  }
  const totals = new Map();
  const files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'));
  for (const f of files) {
    const prof = JSON.parse(readFileSync(path.join(dir, f), 'utf8'));
    // A sample belongs to the innermost frame that is ours or a package's; samples with only
    // node frames are split into the module loader (resolve/read/compile/link) and the rest.
    const byId = new Map(prof.nodes.map((node) => [node.id, node]));
    const parent = new Map();
    for (const node of prof.nodes) for (const c of node.children ?? []) parent.set(c, node.id);
    const owner = new Map();
    const ownerFor = (id) => {
      if (owner.has(id)) return owner.get(id);
      const self = ownerOf(byId.get(id).callFrame);
      let o = self;
      if (self === 'node internals' || self === '(native)') {
        const up = parent.get(id);
        const inherited = up === undefined ? self : ownerFor(up);
        if (inherited !== 'node internals' && inherited !== '(native)' && !inherited.startsWith('(')) o = inherited;
        else if (/node:internal\/modules\//.test(byId.get(id).callFrame.url) || inherited === 'node module loader')
          o = 'node module loader';
        else if (inherited === 'node internals') o = 'node internals';
      }
      owner.set(id, o);
      return o;
    };
    for (let i = 0; i < prof.samples.length; i++) {
      const dt = (prof.timeDeltas[i + 1] ?? 0) / 1000;
      const k = ownerFor(prof.samples[i]);
      totals.set(k, (totals.get(k) ?? 0) + dt);
    }
  }
  const ranked = [...totals].map(([k, v]) => [k, v / files.length]).sort((a, b) => b[1] - a[1]);
  return { runs: files.length, ranked };
}

function ownerOf(frame) {
  const url = frame.url ?? '';
  if (!url) return frame.functionName?.startsWith('(') ? frame.functionName : '(native)';
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + '/node_modules/'.length).split('/');
    return rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0];
  }
  if (url.startsWith('node:')) return 'node internals';
  if (url.includes('/dist/') || url.includes('/bin/leasejob')) return 'leasejob';
  return 'other';
}
