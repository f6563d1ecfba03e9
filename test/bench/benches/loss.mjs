// Loss to stop: the database is cut off mid-run (a TCP proxy between runner and server), and we
// time how long the child lives on. TTL 3 s, kill grace 500 ms: the runner must have its child
// gone before `last successful renewal + TTL`. Two ways to cut:
//   reset:     every connection reset, new ones refused (the server went away);
//   blackhole: connections stay open but nothing passes (a partition; only timeouts notice).
// Per trial: cut -> child gone (/proc/<pid> missing or a zombie, polled every 2 ms), and
// last renewal (renewed_at, read from the server directly) -> child gone, against the TTL.
import path from 'node:path';
import { BIN, NODE, isAlive, phaseSleep, runTrials, stampCmd, start, waitFor, waitStamp } from '../lib/proc.mjs';
import { startProxy } from '../../helpers/proxy.mjs';

const TTL_MS = 3000;

export async function run(ctx) {
  const trials = ctx.n(5, 1);
  for (const mode of ['reset', 'blackhole']) {
    const { results, problems } = await runTrials(trials, (t) => trial(ctx, mode, t, trials));
    const renewToGone = results.map((r) => r.renewToGone);
    ctx.report.add({
      bench: 'loss',
      name: `${mode}: last renewal -> child gone`,
      unit: 'ms',
      samples: renewToGone,
      baseline: { name: 'TTL', samples: renewToGone.map(() => TTL_MS), paired: false },
      target: {
        text: `< ${TTL_MS} ms (TTL), always`,
        ok: renewToGone.length === trials && renewToGone.every((x) => x < TTL_MS),
      },
      note:
        `runner exit codes: ${results.map((r) => r.code).join(', ')} (75 = lease lost)` +
        (problems.length ? `; problems: ${problems.slice(0, 3).join(' | ')}` : ''),
    });
    ctx.report.add({
      bench: 'loss',
      name: `${mode}: cut -> child gone`,
      unit: 'ms',
      samples: results.map((r) => r.cutToGone),
    });
  }
}

async function trial(ctx, mode, t, trials) {
  const proxy = await startProxy(ctx.url);
  try {
    const job = ctx.uid(`loss-${mode}`);
    const stamp = path.join(ctx.tmp, `${job}.stamp`);
    const env = { ...ctx.env, LEASEJOB_DATABASE_URL: proxy.url(ctx.url) };
    const runner = start(
      NODE,
      [
        BIN,
        'run',
        '--name',
        job,
        '--schema',
        ctx.schema,
        '--ttl',
        `${TTL_MS / 1000}s`,
        '--kill-grace',
        '500ms',
        '--window',
        'w1',
        '--',
        'sh',
        '-c',
        `${stampCmd(stamp)}; exec sleep 60`,
      ],
      { env },
    );
    const child = await waitStamp(stamp, 'child');
    // Cut at a spread of phases after the first renewal (renewals every 1 s).
    await phaseSleep(1200, 1000, t, trials);
    const cutMono = performance.now();
    proxy.cut(mode);
    await waitFor(() => !isAlive(child.pid), { everyMs: 2, timeoutMs: 30_000, what: 'child to stop' });
    const goneMono = performance.now();
    const goneWall = Date.now();
    const lease = (await ctx.admin.query(`SELECT renewed_at FROM "${ctx.schema}".leases WHERE name = $1`, [job]))
      .rows[0];
    const res = await runner.done;
    return { cutToGone: goneMono - cutMono, renewToGone: goneWall - lease.renewed_at.getTime(), code: res.code };
  } finally {
    await proxy.close();
  }
}
