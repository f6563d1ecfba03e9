// `status` and the exporter's scrape with 10,000 registered jobs (10 windows each) and
// 1,000,000 events (seed.mjs; --quick seeds 2,000 jobs and 200,000 events). Target: < 300 ms.
// Interleaved per iteration (rotating order):
//   status CLI end to end (table and --json), against status on an empty schema (node start,
//   module load, connect: the floor of any CLI call);
//   readJobStates in-process (dist/monitor/job-states.js), against the server's execution time of the
//   statements it sent (pg_stat_statements total_exec_time delta);
//   readOccurrenceCounts in-process (occurrences by reason, the exporter's third read), against
//   readJobStates;
//   Exporter.scrape() in-process (dist/monitor/exporter.js, a new Exporter each time), against
//   readJobStates (the difference is building and formatting the metrics);
//   GET /metrics from a running `leasejob exporter`, against the in-process scrape;
//   GET / (the status page's first 100 jobs) and GET /?q=... (a search) from it, against GET /metrics.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { BIN, NODE, ROOT, logLines, start, stopProcess, timed, waitFor } from '../lib/proc.mjs';
import { rotate, summarize } from '../lib/stats.mjs';
import { seedJobs } from '../seed.mjs';

const dist = (f) => pathToFileURL(path.join(ROOT, 'dist', f)).href;

export async function run(ctx) {
  const jobs = ctx.quick ? 2_000 : 10_000;
  const events = ctx.quick ? 200_000 : 1_000_000;
  const schema = 'bench_mon';
  const empty = 'bench_empty';
  await ctx.migrate(schema);
  await ctx.migrate(empty);
  const t = performance.now();
  await seedJobs(ctx.admin, schema, { jobs, events });
  const seedMs = performance.now() - t;
  ctx.log(`seeded ${jobs} jobs, ${events} events in ${(seedMs / 1000).toFixed(1)} s`);
  const label = `${jobs / 1000}k jobs`;

  const api = await monitorApi(ctx, schema);
  const exporter = await startExporter(ctx, schema);
  const n = ctx.n(15, 3);
  const s = {
    statusCli: [],
    statusJson: [],
    statusEmpty: [],
    read: [],
    readServer: [],
    occurrences: [],
    scrape: [],
    http: [],
    page: [],
    search: [],
  };
  const info = { statusBytes: 0, statusJsonBytes: 0, metricsBytes: 0, series: 0, cold: {} };
  const errors = [];
  // stdout to a regular file: a pipe would time how fast we drain it (and see the output cut
  // short, checked once below).
  const outFile = path.join(ctx.tmp, 'status.out');
  const cli = async (args) => {
    const r = await timed(NODE, [BIN, 'status', ...args], { env: ctx.env, stdoutFile: outFile });
    return { ...r, stdout: readFileSync(outFile, 'utf8') };
  };

  // Cold in-process calls first (JIT, schedule caches), reported apart.
  let t0 = performance.now();
  await api.readJobStates();
  info.cold.readJobStatesMs = performance.now() - t0;
  t0 = performance.now();
  await api.newExporter().scrape();
  info.cold.scrapeMs = performance.now() - t0;

  const steps = [
    async () => {
      const r = await cli(['--schema', schema]);
      if (r.code !== 0) errors.push(`status exit ${r.code}: ${r.stderr.slice(-200)}`);
      s.statusCli.push(r.code === 0 ? r.ms : NaN);
      info.statusBytes = r.stdout.length;
      // One line per job plus a header: fewer means the output was cut short.
      const rows = r.stdout.split('\n').filter((l) => /^job-\d+\s/.test(l)).length;
      if (rows < jobs) errors.push(`status printed ${rows} of ${jobs} job rows (${r.stdout.length} bytes) into a file`);
    },
    async () => {
      const r = await cli(['--schema', schema, '--json']);
      if (r.code !== 0) errors.push(`status --json exit ${r.code}`);
      s.statusJson.push(r.code === 0 ? r.ms : NaN);
      info.statusJsonBytes = r.stdout.length;
      try {
        const parsed = JSON.parse(r.stdout);
        if (parsed.jobs?.length !== jobs) errors.push(`status --json listed ${parsed.jobs?.length} of ${jobs} jobs`);
      } catch {
        errors.push(`status --json printed ${r.stdout.length} bytes into a file that are not valid JSON`);
      }
    },
    async () => {
      const r = await cli(['--schema', empty]);
      if (r.code !== 0) errors.push(`status (empty) exit ${r.code}`);
      s.statusEmpty.push(r.code === 0 ? r.ms : NaN);
    },
    async () => {
      const before = await serverTime(ctx);
      const tt = performance.now();
      const { jobs: states } = await api.readJobStates();
      s.read.push(performance.now() - tt);
      const after = await serverTime(ctx);
      if (before !== undefined) s.readServer.push(after - before);
      if (states.length !== jobs) errors.push(`readJobStates returned ${states.length} jobs, expected ${jobs}`);
    },
    async () => {
      const tt = performance.now();
      const counts = await api.readOccurrenceCounts();
      s.occurrences.push(performance.now() - tt);
      if (new Set(counts.map((c) => c.job)).size !== jobs) errors.push(`readOccurrenceCounts: ${counts.length} rows`);
    },
    async () => {
      const tt = performance.now();
      const body = await api.newExporter().scrape();
      s.scrape.push(performance.now() - tt);
      info.metricsBytes = body.length;
      info.series = body.split('\n').filter((l) => l && !l.startsWith('#')).length;
    },
    async () => {
      if (!exporter.url) return;
      const tt = performance.now();
      const res = await fetch(exporter.url);
      const body = await res.text();
      s.http.push(performance.now() - tt);
      if (res.status !== 200 || !body.includes('leasejob_up 1'))
        errors.push(`GET /metrics: ${res.status}, up=${/leasejob_up (\d)/.exec(body)?.[1]}`);
    },
    async () => {
      if (!exporter.url) return;
      for (const [samples, query, expect] of [
        [s.page, '', `of ${jobs}<`],
        [s.search, '?q=job-77', 'matching'],
      ]) {
        const tt = performance.now();
        const res = await fetch(new URL(`/${query}`, exporter.url));
        const body = await res.text();
        samples.push(performance.now() - tt);
        info.pageBytes = query ? info.pageBytes : body.length;
        if (res.status !== 200 || !body.includes(expect))
          errors.push(`GET /${query}: ${res.status}, ${body.length} bytes`);
      }
    },
  ];
  for (let i = 0; i < n; i++) for (const step of rotate(steps, i)) await step();
  // Into a pipe, as in `leasejob status | grep x` or `status --json | jq`: is it all there?
  const piped = [];
  for (const [args, fileBytes] of [
    [['--schema', schema], info.statusBytes],
    [['--schema', schema, '--json'], info.statusJsonBytes],
  ]) {
    const r = await timed(NODE, [BIN, 'status', ...args], { env: ctx.env, stdout: true });
    piped.push({ args: args.slice(2).join(' ') || '(table)', pipeBytes: r.stdout.length, fileBytes });
  }
  const cut = piped.filter((p) => p.pipeBytes < p.fileBytes);
  if (cut.length) {
    ctx.report.note(
      `monitor: status output into a pipe is cut short: ${cut.map((p) => `${p.args} ${p.pipeBytes} of ${p.fileBytes} bytes`).join(', ')} (the process exits before stdout drains)`,
    );
  }
  await exporter.stop();
  await api.close();

  const lt300 = (xs) => ({ text: '< 300 ms', ok: xs.length > 0 && summarize(xs).median < 300 });
  const rep = ctx.report;
  rep.add({
    bench: 'monitor',
    name: `status CLI, ${label} (table)`,
    unit: 'ms',
    samples: s.statusCli,
    baseline: { name: 'status CLI, empty schema', samples: s.statusEmpty },
    target: lt300(s.statusCli),
    note: `${Math.round(info.statusBytes / 1024)} KiB of output; seeded in ${(seedMs / 1000).toFixed(1)} s`,
  });
  rep.add({
    bench: 'monitor',
    name: `status --json CLI, ${label}`,
    unit: 'ms',
    samples: s.statusJson,
    baseline: { name: 'status CLI, empty schema', samples: s.statusEmpty },
    target: lt300(s.statusJson),
    note: `${Math.round(info.statusJsonBytes / 1024)} KiB of output`,
  });
  rep.add({
    bench: 'monitor',
    name: `readJobStates in-process, ${label}`,
    unit: 'ms',
    samples: s.read,
    ...(s.readServer.length ? { baseline: { name: 'its SQL, server exec time', samples: s.readServer } } : {}),
    target: lt300(s.read),
    note: `cold first call ${Math.round(info.cold.readJobStatesMs)} ms (store API)`,
  });
  rep.add({
    bench: 'monitor',
    name: `readOccurrenceCounts in-process, ${label}`,
    unit: 'ms',
    samples: s.occurrences,
    baseline: { name: 'readJobStates', samples: s.read },
    target: lt300(s.occurrences),
    note: 'the windows within the lookback, and the skip events without a ledger row',
  });
  rep.add({
    bench: 'monitor',
    name: `Exporter.scrape() in-process, ${label}`,
    unit: 'ms',
    samples: s.scrape,
    baseline: { name: 'readJobStates', samples: s.read },
    target: lt300(s.scrape),
    note: `cold first scrape ${Math.round(info.cold.scrapeMs)} ms; ${info.series} series, ${(info.metricsBytes / 2 ** 20).toFixed(1)} MiB of text`,
  });
  if (s.http.length) {
    rep.add({
      bench: 'monitor',
      name: `GET /metrics (leasejob exporter), ${label}`,
      unit: 'ms',
      samples: s.http,
      baseline: { name: 'Exporter.scrape() in-process', samples: s.scrape },
      target: lt300(s.http),
    });
    rep.add({
      bench: 'monitor',
      name: `GET / status page (100 of ${label})`,
      unit: 'ms',
      samples: s.page,
      baseline: { name: 'GET /metrics', samples: s.http },
      target: lt300(s.page),
      note: `${Math.round((info.pageBytes ?? 0) / 1024)} KiB of HTML`,
    });
    rep.add({
      bench: 'monitor',
      name: `GET /?q= status page search, ${label}`,
      unit: 'ms',
      samples: s.search,
      baseline: { name: 'GET /metrics', samples: s.http },
      target: lt300(s.search),
    });
  } else {
    rep.note(`monitor: GET /metrics not measured: ${exporter.note}`);
  }
  if (errors.length) {
    const kinds = [...new Set(errors.map((e) => e.replace(/\d+/g, 'N')))];
    rep.note(
      `monitor: ${errors.length} problems (${kinds.length} kinds), e.g. ${kinds
        .map((k) => errors.find((e) => e.replace(/\d+/g, 'N') === k))
        .slice(0, 4)
        .join(' | ')}`,
    );
  }
}

/** readJobStates and Exporter over a PgStore on the bench's server, as the exporter command opens it. */
async function monitorApi(ctx, schema) {
  const monitor = await import(dist('monitor/job-states.js'));
  const { Exporter } = await import(dist('monitor/exporter.js'));
  const { silentLogger } = await import(dist('log.js'));
  const { resolveConnection } = await import(dist('store/postgres/connection.js'));
  const { PgStore, createPool } = await import(dist('store/postgres/store.js'));
  // What the exporter command opens: a pool of 4 (its scrape runs three queries at once).
  const pool = createPool(resolveConnection(ctx.url), { max: 4 });
  const store = new PgStore(pool, schema, `bench schema ${schema}`);
  return {
    readJobStates: () => monitor.readJobStates(store),
    readOccurrenceCounts: () => store.readOccurrenceCounts(),
    newExporter: () => new Exporter(store, silentLogger),
    close: () => pool.end(),
  };
}

/** Sum of total_exec_time (ms) of what the runners' role ran, or undefined without pg_stat_statements. */
async function serverTime(ctx) {
  if (!ctx.pgss) return undefined;
  const { rows } = await ctx.observer.query(
    "SELECT coalesce(sum(total_exec_time), 0)::float8 AS ms FROM pg_stat_statements WHERE toplevel AND userid = (SELECT oid FROM pg_roles WHERE rolname = 'postgres')",
  );
  return rows[0].ms;
}

async function startExporter(ctx, schema) {
  const p = start(NODE, [BIN, 'exporter', '--schema', schema, '--port', '0', '--host', '127.0.0.1'], { env: ctx.env });
  const stop = () => stopProcess(p.child, 5_000);
  try {
    const line = await waitFor(() => logLines(p.stderr()).find((l) => l.msg === 'exporter listening' && l.port), {
      timeoutMs: 15_000,
      what: 'exporter to listen',
    });
    return { url: `http://127.0.0.1:${line.port}/metrics`, stop };
  } catch (err) {
    await stop();
    return { note: `${err.message}; stderr: ${p.stderr().slice(-200)}`, stop: async () => {} };
  }
}
