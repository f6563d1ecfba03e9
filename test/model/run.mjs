// `npm run model`: the occurrence model-based test (test/model/README.md) for longer than the
// bounded run of `npm test`: vitest runs the model's test files with the budget given here.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const USAGE = `Usage: npm run model -- [--runs N] [--max-commands M] [--seed S] [--path P] [--store postgres|sqlite]
                         [--only KINDS]

Random sequences of runs, crashes, releases, replaces, marks, reruns, pauses, prunes, schedule
changes (and, embedded store, state-file restores) through the built CLI, each step compared
with the reference model (test/model/occurrence-model.ts).

  --runs N           sequences per store (default 25)
  --max-commands M   steps per sequence at most (default 12)
  --seed S           fast-check's seed (printed by a failing run; random when not given)
  --path P           with --seed: replay this counterexample path (printed by a failing run)
  --store KIND       only this store: postgres or sqlite (default both)
  --only K1,K2       only these step kinds: run, rerun, crash (or crash-release, crash-expire),
                     replace, mark, pause, prune, schedule-change, backup, restore (default all)
  -h, --help         this text

Exit 0 when every sequence agreed with the model, 1 otherwise.`;

const args = process.argv.slice(2);
const opts = { runs: '25', 'max-commands': '12', seed: '', path: '', store: '', only: '' };
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '-h' || a === '--help') {
    console.log(USAGE);
    process.exit(0);
  }
  const name = a.replace(/^--/, '');
  if (!a.startsWith('--') || !(name in opts) || args[i + 1] === undefined) {
    console.error(`model: unknown or incomplete option ${a}\n\n${USAGE}`);
    process.exit(64);
  }
  opts[name] = args[++i];
}
for (const n of ['runs', 'max-commands', ...(opts.seed ? ['seed'] : [])])
  if (!/^-?\d+$/.test(opts[n])) {
    console.error(`model: --${n} must be an integer, not ${opts[n]}`);
    process.exit(64);
  }
if (opts.store && !['postgres', 'sqlite'].includes(opts.store)) {
  console.error(`model: --store must be postgres or sqlite, not ${opts.store}`);
  process.exit(64);
}

const root = fileURLToPath(new URL('../../', import.meta.url));
const files = (opts.store ? [opts.store] : ['postgres', 'sqlite']).map((s) => `test/model/model-${s}.test.ts`);
const r = spawnSync(process.execPath, [path.join(root, 'node_modules', 'vitest', 'vitest.mjs'), 'run', ...files], {
  cwd: root,
  stdio: 'inherit',
  env: {
    ...process.env,
    LEASEJOB_MODEL_RUNS: opts.runs,
    LEASEJOB_MODEL_MAX_COMMANDS: opts['max-commands'],
    LEASEJOB_MODEL_SEED: opts.seed,
    LEASEJOB_MODEL_PATH: opts.path,
    LEASEJOB_MODEL_STORE: opts.store,
    LEASEJOB_MODEL_ONLY: opts.only,
  },
});
process.exit(r.status === 0 ? 0 : 1);
