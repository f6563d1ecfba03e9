// Peak RSS of the runner while its child runs: /proc/<runner pid>/status polled every 20 ms;
// the figure is VmHWM as last read while the child was still alive (so it includes start-up,
// connect, acquire, spawning, and the renewals during the run: TTL 3 s, child 3.5 s, about 3
// renewals). Interleaved with two baselines polled the same way: an idle `node` and a node
// that has loaded the run path (dist/cli/main.js + dist/cli/commands/run.js) and then idles.
import path from 'node:path';
import { BENCH_DIR, BIN, NODE, isAlive, procStatus, readStamp, sleep, stampCmd, start } from '../lib/proc.mjs';
import { rotate } from '../lib/stats.mjs';

const IMPORT_TIME = path.join(BENCH_DIR, 'fixtures', 'import-time.mjs');

export async function run(ctx) {
  const n = ctx.n(6, 1);
  const job = ctx.uid('rss');
  let w = 0;
  const childMs = 3500;
  const runner = () => {
    const stamp = path.join(ctx.tmp, `${job}-${++w}.stamp`);
    const p = start(
      NODE,
      [
        BIN,
        'run',
        '--name',
        job,
        '--schema',
        ctx.schema,
        '--ttl',
        '3s',
        '--kill-grace',
        '500ms',
        '--window',
        `r${w}`,
        '--',
        'sh',
        '-c',
        `${stampCmd(stamp)}; sleep ${childMs / 1000}`,
      ],
      { env: ctx.env },
    );
    return { p, childPid: () => readStamp(stamp)?.pid };
  };
  const contenders = [
    { name: 'runner', start: runner },
    {
      name: 'node idle',
      start: () => ({ p: start(NODE, ['-e', `setTimeout(() => {}, ${childMs})`], { env: ctx.env }) }),
    },
    {
      name: 'node + run path loaded, idle',
      start: () => ({
        p: start(NODE, [IMPORT_TIME, 'dist/cli/main.js', 'dist/cli/commands/run.js'], {
          env: { ...ctx.env, BENCH_HOLD_MS: String(childMs) },
          stdout: true,
        }),
      }),
    },
  ];
  const peak = Object.fromEntries(contenders.map((c) => [c.name, []]));
  const runnerMaxRss = [];
  const failures = [];
  for (let i = 0; i < n; i++) {
    for (const c of rotate(contenders, i)) {
      const h = c.start();
      let hwm = 0;
      let rss = 0;
      let sawChild = false;
      for (;;) {
        const st = procStatus(h.p.pid);
        if (!st || !isAlive(h.p.pid)) break;
        const childPid = h.childPid?.();
        const childAlive = childPid !== undefined && isAlive(childPid);
        if (!h.childPid || childAlive) hwm = Math.max(hwm, st.VmHWM ?? 0);
        if (childAlive) sawChild = true;
        rss = Math.max(rss, st.VmRSS ?? 0);
        await sleep(20);
      }
      const r = await h.p.done;
      if (r.code !== 0) failures.push(`${c.name} exit ${r.code}: ${r.stderr.slice(-200)}`);
      if (h.childPid && !sawChild) failures.push(`${c.name}: never saw the child running`);
      const ok = r.code === 0 && (!h.childPid || sawChild);
      peak[c.name].push(ok ? hwm / 1024 : NaN);
      if (c.name === 'runner') runnerMaxRss.push(ok ? rss / 1024 : NaN);
    }
  }
  const runnerPeak = peak.runner;
  ctx.report.add({
    bench: 'rss',
    name: 'runner VmHWM while child runs',
    unit: 'MB',
    samples: runnerPeak,
    baseline: { name: 'node idle', samples: peak['node idle'] },
    target: { text: '<= 70 MB', ok: runnerPeak.length > 0 && runnerPeak.every((x) => x <= 70) },
    note: `max VmRSS seen over the whole runner process (incl. finish): ${runnerMaxRss.map((x) => x.toFixed(1)).join(', ')} MB`,
  });
  ctx.report.add({
    bench: 'rss',
    name: 'runner VmHWM while child runs',
    unit: 'MB',
    samples: runnerPeak,
    baseline: { name: 'run path loaded, idle', samples: peak['node + run path loaded, idle'] },
  });
  if (failures.length) ctx.report.note(`rss: ${failures.slice(0, 3).join(' | ')}`);
}
