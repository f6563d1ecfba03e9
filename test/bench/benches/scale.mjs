// Cost as history grows (issue 24), and the capacity of one PostgreSQL.
// 1. A schema seeded with a long history (seed.mjs seedHistory: 10,000 every-minute jobs,
//    10 million events, 2 million windows over 200 days; `--scale F` multiplies events and
//    windows, --quick uses 0.02) against the same 10,000 jobs with no history (one window, five
//    events each), interleaved: `run -- true`, `status`, `check --all`, a scrape. Target 1.2x.
// 2. `prune --older-than 30d` on the long history: rows/s from its summary, and meanwhile
//    acquire+finish cycles on jobs being pruned, whose slowest cycle is the longest a run waited
//    (against the same cycles before the prune).
// 3. Capacity: acquire+finish cycles per second with 1, 8 and 32 clients, each on its own
//    connection calling the schema's functions directly as a fleet of runners would, each cycle
//    a new window of its own job; p50/p99 of a cycle.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { BIN, NODE, ROOT, timed } from '../lib/proc.mjs';
import { quantile, rotate, summarize } from '../lib/stats.mjs';
import { seedHistory } from '../seed.mjs';

/** The largest of many samples: spreading 100,000 of them into Math.max overflows the stack. */
const maxOf = (xs) => xs.reduce((m, x) => (x > m ? x : m), -Infinity);

const dist = (f) => pathToFileURL(path.join(ROOT, 'dist', f)).href;

export async function run(ctx) {
  const factor = ctx.scale ?? (ctx.quick ? 0.02 : 1);
  const jobs = 10_000;
  const big = 'bench_hist';
  const empty = 'bench_nohist';
  await ctx.migrate(big);
  await ctx.migrate(empty);
  let t = performance.now();
  const seeded = await seedHistory(ctx.admin, big, {
    jobs,
    events: Math.round(10_000_000 * factor),
    windows: Math.round(2_000_000 * factor),
  });
  const seedMs = performance.now() - t;
  ctx.log(
    `seeded ${seeded.jobs} jobs, ${seeded.events} events, ${seeded.windows} windows in ${(seedMs / 1000).toFixed(1)} s`,
  );
  await seedHistory(ctx.admin, empty, { jobs, events: 5 * jobs, windows: jobs });
  // The seeding's dirty pages written out before anything is timed: otherwise the checkpoint
  // of gigabytes just loaded competes with the first reads of whichever schema comes first.
  await ctx.admin.query('CHECKPOINT');
  const label = `${seeded.events / 1e6}M events, ${seeded.windows / 1e6}M windows`;

  const api = await storeApi(ctx);
  const n = ctx.n(10, 3);
  const s = {
    runBig: [],
    runEmpty: [],
    statusBig: [],
    statusEmpty: [],
    checkBig: [],
    checkEmpty: [],
    scrapeBig: [],
    scrapeEmpty: [],
  };
  const errors = [];
  const outFile = path.join(ctx.tmp, 'scale.out');
  const cli = async (args, into, okCodes = [0]) => {
    const r = await timed(NODE, [BIN, ...args], { env: ctx.env, stdoutFile: outFile });
    if (!okCodes.includes(r.code)) errors.push(`${args.slice(0, 3).join(' ')} exit ${r.code}: ${r.stderr.slice(-200)}`);
    into.push(okCodes.includes(r.code) ? r.ms : NaN);
  };
  let w = 0;
  const steps = [];
  for (const [schema, key] of [
    [big, 'Big'],
    [empty, 'Empty'],
  ]) {
    steps.push(async () =>
      cli(['run', '--schema', schema, '--name', 'job-17', '--window', `bench-${++w}`, '--', 'true'], s[`run${key}`]),
    );
    steps.push(async () => cli(['status', '--schema', schema], s[`status${key}`]));
    // check judges due windows; the seeded ones are a minute old: 0 or 2 both answer.
    steps.push(async () => cli(['check', '--all', '--schema', schema], s[`check${key}`], [0, 1, 2]));
    steps.push(async () => {
      const tt = performance.now();
      await api.scrape(schema);
      s[`scrape${key}`].push(performance.now() - tt);
    });
  }
  for (let i = 0; i < n; i++) for (const step of rotate(steps, i)) await step();

  const within = (a, b) => ({
    text: '≤ 1.2 × no history',
    ok: a.length > 0 && b.length > 0 && summarize(a).median <= 1.2 * summarize(b).median,
  });
  const rep = ctx.report;
  const noHist = '10k jobs, no history';
  rep.add({
    bench: 'scale',
    name: `run -- true, 10k jobs, ${label}`,
    unit: 'ms',
    samples: s.runBig,
    baseline: { name: noHist, samples: s.runEmpty },
    target: within(s.runBig, s.runEmpty),
    note: `seeded in ${(seedMs / 1000).toFixed(0)} s`,
  });
  rep.add({
    bench: 'scale',
    name: `status CLI, 10k jobs, ${label}`,
    unit: 'ms',
    samples: s.statusBig,
    baseline: { name: noHist, samples: s.statusEmpty },
    target: within(s.statusBig, s.statusEmpty),
  });
  rep.add({
    bench: 'scale',
    name: `check --all CLI, 10k jobs, ${label}`,
    unit: 'ms',
    samples: s.checkBig,
    baseline: { name: noHist, samples: s.checkEmpty },
    target: within(s.checkBig, s.checkEmpty),
  });
  rep.add({
    bench: 'scale',
    name: `Exporter.scrape() in-process, 10k jobs, ${label}`,
    unit: 'ms',
    samples: s.scrapeBig,
    baseline: { name: noHist, samples: s.scrapeEmpty },
    target: within(s.scrapeBig, s.scrapeEmpty),
  });

  // 2. Prune to 30 days with cycles running on jobs it prunes.
  const before = await cycleLoop(ctx, big, 'job-', 4, () => false, 3_000);
  let pruning = true;
  const during = cycleLoop(ctx, big, 'job-', 4, () => !pruning);
  t = performance.now();
  const pr = await timed(NODE, [BIN, 'prune', '--schema', big, '--older-than', '30d'], {
    env: ctx.env,
    stdoutFile: outFile,
  });
  const pruneMs = performance.now() - t;
  pruning = false;
  const cycles = await during;
  const summary = readFileSync(outFile, 'utf8');
  if (pr.code !== 0) errors.push(`prune exit ${pr.code}: ${pr.stderr.slice(-300)}`);
  const rows = Number(/^(\d+) rows in/m.exec(summary)?.[1] ?? NaN);
  const evs = Number(/^events: +(\d+)/m.exec(summary)?.[1] ?? NaN);
  const wins = Number(/^windows: +(\d+)/m.exec(summary)?.[1] ?? NaN);
  rep.add({
    bench: 'scale',
    name: 'prune --older-than 30d, rows/s',
    unit: 'rows/s',
    samples: [Math.round((rows * 1000) / pruneMs)],
    note: `${evs} events + ${wins} windows in ${(pruneMs / 1000).toFixed(1)} s (CLI, end to end)`,
  });
  rep.add({
    bench: 'scale',
    name: 'acquire+finish cycle while prune runs (slowest = longest wait)',
    unit: 'ms',
    samples: cycles.ms,
    baseline: { name: 'the same cycles before prune', samples: before.ms },
    note: `slowest ${Math.round(maxOf(cycles.ms))} ms (before: ${Math.round(maxOf(before.ms))} ms), p99 ${Math.round(
      quantile(
        [...cycles.ms].sort((a, b) => a - b),
        0.99,
      ),
    )} ms, ${cycles.ms.length} cycles, ${cycles.errors} errors`,
  });

  // 3. Capacity.
  for (const clients of [1, 8, 32]) {
    const r = await cycleLoop(ctx, empty, `cap${clients}-`, clients, () => false, ctx.n(10_000, 3_000));
    const perSec = (r.ms.length * 1000) / r.elapsedMs;
    const sorted = [...r.ms].sort((a, b) => a - b);
    rep.add({
      bench: 'scale',
      name: `capacity: acquire+finish, ${clients} client(s)`,
      unit: 'ms',
      samples: r.ms,
      note: `${Math.round(perSec)} cycles/s (${Math.round(perSec * 60).toLocaleString('en-US')} one-minute jobs), p50 ${quantile(sorted, 0.5).toFixed(1)} ms, p99 ${quantile(sorted, 0.99).toFixed(1)} ms, ${r.errors} errors`,
    });
  }
  await api.close();
  if (errors.length) rep.note(`scale: ${errors.length} problems, e.g. ${errors.slice(0, 3).join(' | ')}`);
}

/**
 * `clients` loops, each on its own connection, of acquire + finish (completed) of a new window of
 * its own job (`prefix` + client number + 1), as `leasejob run` sends them, until `stop()` or
 * `durationMs`. Each cycle's milliseconds.
 */
async function cycleLoop(ctx, schema, prefix, clients, stop, durationMs = Infinity) {
  const s = `"${schema}"`;
  const ms = [];
  let errors = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      const client = new pg.Client({ connectionString: ctx.url });
      await client.connect();
      const job = `${prefix}${c + 1}`;
      const owner = `bench:${process.pid}:${c}`;
      try {
        for (let k = 0; !stop() && performance.now() - started < durationMs; k++) {
          const window = `cycle-${process.pid}-${c}-${k}-${Math.random().toString(16).slice(2, 8)}`;
          const t = performance.now();
          try {
            const a = (
              await client.query(
                `SELECT * FROM ${s}.acquire($1, $2, 90000, 30000, $3, now(), false, NULL, now(), NULL, 500)`,
                [job, owner, window],
              )
            ).rows[0];
            if (a.outcome === 'acquired') {
              await client.query(`SELECT * FROM ${s}.finish($1, $2, $3, $4, 'completed', 0, now(), '{}')`, [
                job,
                owner,
                a.generation,
                window,
              ]);
            } else errors++;
            ms.push(performance.now() - t);
          } catch {
            errors++;
          }
        }
      } finally {
        await client.end();
      }
    }),
  );
  return { ms, errors, elapsedMs: performance.now() - started };
}

/** The exporter's scrape in-process over a PgStore per schema, as the exporter command opens it. */
async function storeApi(ctx) {
  const { Exporter } = await import(dist('monitor/exporter.js'));
  const { silentLogger } = await import(dist('log.js'));
  const { resolveConnection } = await import(dist('store/postgres/connection.js'));
  const { PgStore, createPool } = await import(dist('store/postgres/store.js'));
  const pools = [];
  const stores = new Map();
  const storeOf = (schema) => {
    if (!stores.has(schema)) {
      const pool = createPool(resolveConnection(ctx.url), { max: 4 });
      pools.push(pool);
      stores.set(schema, new PgStore(pool, schema, `bench schema ${schema}`));
    }
    return stores.get(schema);
  };
  return {
    scrape: (schema) => new Exporter(storeOf(schema), silentLogger).scrape(),
    close: () => Promise.all(pools.map((p) => p.end())),
  };
}
