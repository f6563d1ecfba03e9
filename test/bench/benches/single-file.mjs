// The single executable's start (issue 16): `leasejob run -- true` from the file built by
// `npm run single-file` (its Node, its bundle and V8's code cache for it in one file), against
// `node -e 0` of the same Node (the pinned one, from the build's cache) and against the floor of
// a leased run (fixtures/floor.cjs) on that Node and on the machine's; the npm CLI (bin/, the
// machine's Node) alongside. Interleaved, a new window each time. Target: at most 1.0x the
// floor on the same Node. Skipped with a note when the file cannot be built.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { BIN, FLOOR, NODE, ROOT, interleave, timed } from '../lib/proc.mjs';

export async function run(ctx) {
  const file = path.join(ctx.tmp, 'leasejob');
  const built = spawnSync(NODE, [path.join(ROOT, 'scripts', 'single-file.mjs'), '--out', file], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  if (built.status !== 0) {
    ctx.report.note(`single-file skipped: the file could not be built: ${built.stderr.trim().split('\n').at(-1)}`);
    return;
  }
  const { pinnedNode, NODE_VERSION } = await import(path.join(ROOT, 'scripts', 'single-file.mjs'));
  const node24 = pinnedNode(process.arch);
  const n = ctx.n(30, 3);
  const job = ctx.uid('sea');
  let w = 0;
  const runArgs = () => ['run', '--name', job, '--schema', ctx.schema, '--window', `w${++w}`, '--', 'true'];
  const floorArgs = () => [FLOOR, ctx.schema, job, `w${++w}`, '--', 'true'];
  const same = `node ${NODE_VERSION}`;
  const contenders = [
    { name: 'single file run -- true', file, args: runArgs },
    { name: `${same} -e 0`, file: node24, args: () => ['-e', '0'] },
    { name: `floor.cjs on ${same}`, file: node24, args: floorArgs },
    { name: `floor.cjs on node ${process.versions.node}`, file: NODE, args: floorArgs },
    { name: `npm CLI run -- true (node ${process.versions.node})`, file: NODE, args: () => [BIN, ...runArgs()] },
  ];
  const { samples, failed } = await interleave(contenders, n, (c) => timed(c.file, c.args(), { env: ctx.env }));
  if (failed.length)
    ctx.report.note(
      `single-file: ${failed.length} failed processes: ${failed
        .slice(0, 3)
        .map(({ c, r }) => `${c.name}: exit ${r.code ?? r.signal} ${r.stderr.slice(-200)}`)
        .join(' | ')}`,
    );
  const single = samples[contenders[0].name];
  for (const base of contenders.slice(1)) {
    const row = ctx.report.add({
      bench: 'single-file',
      name: 'single file run -- true',
      unit: 'ms',
      samples: single,
      baseline: { name: base.name, samples: samples[base.name] },
    });
    if (base.name === `floor.cjs on ${same}`) row.target = { text: '<= 1.0x', ok: row.ratio <= 1.0 };
  }
}
