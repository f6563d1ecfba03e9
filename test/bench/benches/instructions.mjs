// Instructions per run, counted by valgrind's callgrind: what a run costs the CPU, whatever else
// the machine is doing. Wall and CPU times drift by 10% and more between runs of the other
// benches (frequency, cache, neighbours); an instruction count of the same binary and inputs
// moves by about 2% (garbage collection and event-loop turns fall differently). Counted:
// the Node process itself, all its threads; not the child it spawns (valgrind follows no
// children), and not the PostgreSQL server.
//   - a run: `leasejob run --name J --window wN -- true` against `node -e 0` and the floor
//     (fixtures/floor.cjs), as in the overhead bench;
//   - a busy contender (facing a live owner, --on-busy skip): leasejob against the floor, as
//     each of a herd's contenders.
// valgrind is Debian's `valgrind` (installed with apt-get when missing and root; otherwise
// skipped with a note). A process under valgrind runs about 50 times slower: leasejob's TTL
// default (90 s) leaves every bound far away. The code cache is warmed by an ordinary run
// first (valgrind changes no V8 flag, so the cache is used as in any run).
import { BIN, FLOOR, NODE, interleave, start, stopProcess, timed, waitFor } from '../lib/proc.mjs';
import { aptInstall, which } from '../lib/apt.mjs';

const COLLECTED = /==\d+== Collected : (\d+)/;

/** Millions of instructions of one process under callgrind: { ms: Minstr, code } (interleave's shape). */
async function counted(valgrind, file, args, env) {
  const r = await timed(valgrind, ['--tool=callgrind', '--callgrind-out-file=/dev/null', file, ...args], { env });
  const m = COLLECTED.exec(r.stderr);
  return { ms: m ? Number(m[1]) / 1e6 : NaN, code: m ? r.code : -1, stderr: r.stderr };
}

export async function run(ctx) {
  let valgrind = which('valgrind');
  if (!valgrind) {
    const r = aptInstall(['valgrind'], ctx.log);
    valgrind = r.ok ? which('valgrind') : undefined;
    if (!valgrind) {
      ctx.report.note(`instructions skipped: ${r.ok ? 'valgrind not found after install' : r.note}`);
      return;
    }
  }
  const n = ctx.n(5, 1);
  const job = ctx.uid('ins');
  const busyJob = ctx.uid('insbusy');
  const floorBusyJob = ctx.uid('insbusyfloor');
  let w = 0;
  const runArgs = (name, window) => [
    BIN,
    'run',
    '--name',
    name,
    '--schema',
    ctx.schema,
    ...(window ? ['--window', window] : []),
    '--',
    'true',
  ];
  const floorArgs = (name, window) => [FLOOR, ctx.schema, name, window, '--', 'true'];
  // Warm the code cache with ordinary runs (a busy contender takes another path through it).
  for (const args of [runArgs(job, 'warm1'), runArgs(job, 'warm2')]) await timed(NODE, args, { env: ctx.env });

  // The owners the busy contenders face: each holds its job with a child that lives as long as its runner.
  const untilParentGone = ['sh', '-c', 'while kill -0 "$PPID" 2>/dev/null; do sleep 0.1; done'];
  const holders = [
    start(NODE, [BIN, 'run', '--name', busyJob, '--schema', ctx.schema, '--ttl', '10m', '--', ...untilParentGone], {
      env: ctx.env,
    }),
    start(NODE, [FLOOR, ctx.schema, floorBusyJob, '', '--', ...untilParentGone], { env: ctx.env }),
  ];
  try {
    for (const name of [busyJob, floorBusyJob]) {
      await waitFor(
        async () =>
          (await ctx.admin.query(`SELECT 1 FROM "${ctx.schema}".leases WHERE name = $1 AND expires_at > now()`, [name]))
            .rows.length > 0,
        { timeoutMs: 30_000, what: `${name} held` },
      );
    }
    for (let i = 0; i < 2; i++) await timed(NODE, runArgs(busyJob), { env: ctx.env });

    const contenders = [
      { name: 'leasejob run', args: () => runArgs(job, `w${++w}`) },
      { name: 'node -e 0', args: () => ['-e', '0'] },
      { name: 'floor.cjs', args: () => floorArgs(job, `w${++w}`) },
      { name: 'leasejob run, busy', args: () => runArgs(busyJob) },
      { name: 'floor.cjs, busy', args: () => floorArgs(floorBusyJob, '') },
    ];
    const { samples, failed } = await interleave(contenders, n, (c) => counted(valgrind, NODE, c.args(), ctx.env));
    const failures = failed.map(({ c, r }) => `${c.name} exited ${r.code}: ${r.stderr.slice(-200)}`);
    const spreadNote = 'instructions of the Node process (all threads), not of its child or the server';
    const rows = [
      ['leasejob run -- true', 'leasejob run', 'node -e 0'],
      ['leasejob run -- true', 'leasejob run', 'floor.cjs'],
      ['floor.cjs -- true', 'floor.cjs', 'node -e 0'],
      ['leasejob run, busy contender', 'leasejob run, busy', 'floor.cjs, busy'],
      ['floor.cjs, busy contender', 'floor.cjs, busy', 'node -e 0'],
    ];
    for (const [name, s, base] of rows) {
      ctx.report.add({
        bench: 'instructions',
        name,
        unit: 'Minstr',
        samples: samples[s],
        baseline: { name: base, samples: samples[base] },
        note: spreadNote,
      });
    }
    if (failures.length) ctx.report.note(`instructions: ${failures.slice(0, 3).join(' | ')}`);
  } finally {
    await Promise.all(holders.map((h) => stopProcess(h.child, 5_000)));
  }
}
