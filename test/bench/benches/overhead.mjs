// Overhead per run: `leasejob run --name b --window wN -- true` (a new window each iteration)
// against `node -e 0` (the Node floor), `flock -n FILE true` (a local lock), `etcdctl lock NAME
// -- true` (a network lock service on loopback), `true` (the spawn floor) and fixtures/floor.cjs
// (the floor of a leased run: Node, one raw connection, leasejob's acquire(), `true`, finish(),
// nothing else loaded). When PgBouncer is there (lib/pgbouncer.mjs), leasejob and the floor run
// through it too: a pooled, warm server connection instead of a new backend per run. Iteration
// i runs each contender once, in an order rotated by i, so drift and background load hit all
// alike.
import path from 'node:path';
import { BIN, FLOOR, NODE, interleave, timed } from '../lib/proc.mjs';

/** The start target, set on a row against `node -e 0`. */
const atMost13 = (row) => {
  row.target = { text: '<= 1.3x', ok: row.ratio <= 1.3 };
  return row;
};

export async function run(ctx) {
  const n = ctx.n(30, 3);
  const lockFile = path.join(ctx.tmp, 'flock.lock');
  const job = ctx.uid('b');
  let w = 0;
  const leasejobArgs = () => [BIN, 'run', '--name', job, '--schema', ctx.schema, '--window', `w${++w}`, '--', 'true'];
  const floorArgs = () => [FLOOR, ctx.schema, job, `w${++w}`, '--', 'true'];
  const contenders = [
    { name: 'leasejob run', file: NODE, args: leasejobArgs },
    { name: 'node -e 0', file: NODE, args: () => ['-e', '0'] },
    { name: 'flock -n FILE true', file: 'flock', args: () => ['-n', lockFile, 'true'] },
    { name: 'true', file: 'true', args: () => [] },
    { name: 'floor.cjs -- true', file: NODE, args: floorArgs },
  ];
  if (ctx.etcd) {
    contenders.push({
      name: 'etcdctl lock',
      file: ctx.etcd.etcdctl,
      args: () => ['--endpoints', ctx.etcd.endpoint, 'lock', job, '--', 'true'],
      env: ctx.etcd.env,
    });
  }
  const pooled = ctx.pgbouncer
    ? [
        {
          name: 'leasejob run, through pgbouncer',
          row: 'leasejob run -- true, through pgbouncer',
          file: NODE,
          args: leasejobArgs,
          env: ctx.pgbouncer.env,
        },
        {
          name: 'floor.cjs, through pgbouncer',
          row: 'floor.cjs -- true, through pgbouncer',
          file: NODE,
          args: floorArgs,
          env: ctx.pgbouncer.env,
        },
      ]
    : [];

  // Warm-up: page cache, the first connection's catalog loads, etcd's first lease.
  const { samples, failed } = await interleave([...contenders, ...pooled], n, (c) =>
    timed(c.file, c.args(), { env: c.env ?? ctx.env }),
  );
  const failures = failed.map(({ c, r }) => `${c.name} exited ${r.code ?? r.signal}: ${r.stderr.slice(-300)}`);
  const runS = samples['leasejob run'];
  const rows = [];
  for (const base of contenders.slice(1)) {
    rows.push(
      ctx.report.add({
        bench: 'overhead',
        name: 'leasejob run -- true',
        unit: 'ms',
        samples: runS,
        baseline: { name: base.name, samples: samples[base.name] },
      }),
    );
  }
  // The target is for leasejob; the floor is held to it too, to show whether any Node runner
  // taking this lease could meet it on this machine.
  const floor = atMost13(
    ctx.report.add({
      bench: 'overhead',
      name: 'floor.cjs -- true',
      unit: 'ms',
      samples: samples['floor.cjs -- true'],
      baseline: { name: 'node -e 0', samples: samples['node -e 0'] },
      note: 'the least a Node program taking the same lease can cost: Node, one raw connection, acquire(), spawn `true`, finish(); no driver or logger',
    }),
  );
  const vsNode = atMost13(rows[0]);
  vsNode.note =
    `leasejob run costs ${Math.round(vsNode.pairedDiff.median)} ms more than node -e 0 and ${Math.round(vsNode.summary.median - floor.summary.median)} ms more than the floor (medians)` +
    (failures.length ? `; ${failures.length} non-zero exits: ${failures.slice(0, 2).join(' | ')}` : '');
  if (pooled.length) {
    // The same targets through a pooler, where the server starts no backend per run.
    for (const c of pooled) {
      atMost13(
        ctx.report.add({
          bench: 'overhead',
          name: c.row,
          unit: 'ms',
          samples: samples[c.name],
          baseline: { name: 'node -e 0', samples: samples['node -e 0'] },
        }),
      );
    }
    ctx.report.add({
      bench: 'overhead',
      name: pooled[0].row,
      unit: 'ms',
      samples: samples[pooled[0].name],
      baseline: { name: pooled[1].name, samples: samples[pooled[1].name] },
    });
  }
  if (!ctx.etcd) ctx.report.note('overhead: no etcdctl baseline (see etcd note)');
}
