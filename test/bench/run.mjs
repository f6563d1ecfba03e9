#!/usr/bin/env node
// `npm run bench [-- --quick] [-- --only overhead,statements] [-- --out FILE]`
//
// Performance figures for leasejob (issue "6. Performance"), each measured interleaved with
// its baseline in the same run and reported as median and spread plus the ratio. Starts its
// own PostgreSQL (embedded, with pg_stat_statements preloaded when it can), migrates schemas
// with the built CLI, starts an etcd on loopback for the `etcdctl lock` baseline when it can,
// prints a table and writes JSON (bench-results.json in the current directory by default).
// Not part of `npm test`.
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { spawnSync } from 'node:child_process';
import pg from 'pg';
import { startEmbeddedPostgres } from '../helpers/embedded-pg.mjs';
import { startEtcd } from './lib/etcd.mjs';
import { startBenchPgbouncer } from './lib/pgbouncer.mjs';
import { BIN, NODE, ROOT, timed } from './lib/proc.mjs';
import { Report } from './lib/report.mjs';

const BENCHES = [
  'startup',
  'overhead',
  'instructions',
  'statements',
  'rss',
  'herd',
  'recovery',
  'loss',
  'monitor',
  'scale',
  'single-file',
  'guard',
];

const USAGE = `usage: node test/bench/run.mjs [--quick] [--only ${BENCHES.join(',')}] [--out FILE] [--stmt-method pgss|log]
  --quick         few iterations (smoke run); figures are indicative only
  --only NAMES    comma-separated subset of: ${BENCHES.join(', ')}
  --out FILE      JSON output (default: bench-results.json in the current directory)
  --stmt-method   how statements are counted: pg_stat_statements (default when the server has it) or the server log
  --herd-sizes    comma-separated contender counts for the herd bench (default 10,50,100)
  --scale F       the scale bench's history: F x (10 million events, 2 million windows) over 10,000 jobs (default 1; --quick 0.02)`;

const { values: opts } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    out: { type: 'string', default: 'bench-results.json' },
    'stmt-method': { type: 'string' },
    'herd-sizes': { type: 'string', default: '10,50,100' },
    scale: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  allowPositionals: false,
});
if (opts.help) {
  console.log(USAGE);
  process.exit(0);
}
const selected = opts.only
  ? opts.only
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)
  : BENCHES;
for (const s of selected) {
  if (!BENCHES.includes(s)) {
    console.error(`unknown bench "${s}"\n${USAGE}`);
    process.exit(64);
  }
}
if (!existsSync(path.join(ROOT, 'dist', 'cli', 'main.js'))) {
  console.error('dist/ is missing: run `npm run bench` (it builds first) or `npx tsc -p tsconfig.json`');
  process.exit(1);
}

const log = (...a) => console.error(`[bench ${new Date().toISOString().slice(11, 19)}]`, ...a);
const report = new Report();
const tmp = mkdtempSync(path.join(os.tmpdir(), 'leasejob-bench-'));
const cleanups = [];
let cleaned = false;
async function cleanup() {
  if (cleaned) return;
  cleaned = true;
  for (const fn of cleanups.reverse()) await fn().catch((e) => log('cleanup:', e.message));
  rmSync(tmp, { recursive: true, force: true });
}
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => {
    log(`${sig}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}

// NODE_EXTRA_CA_CERTS (this project's machine sets it to the system's CA bundle) makes Node 20
// parse that bundle at every start: `node -e 0` takes 59 instead of 22 ms here, in every Node
// process measured alike, which would bury what leasejob itself costs under the baseline. Hosts
// and the image usually leave it unset, so the bench measures without it; the startup bench
// reports what it costs (Node 22 and later read it only when TLS needs it).
const extraCaCerts = process.env.NODE_EXTRA_CA_CERTS;
delete process.env.NODE_EXTRA_CA_CERTS;

const loadStart = os.loadavg();
const started = new Date();
try {
  // PostgreSQL: pg_stat_statements needs shared_preload_libraries at server start; track=all
  // also records the statements run inside our functions (toplevel=false), which we report
  // separately from the statements the runner sends (toplevel=true).
  const serverLog = { enabled: false, text: '' };
  const onLog = (chunk) => {
    if (serverLog.enabled) serverLog.text += chunk;
  };
  const wantPgss = opts['stmt-method'] !== 'log';
  let server;
  let preload = false;
  if (wantPgss) {
    try {
      server = await startEmbeddedPostgres({
        onLog,
        postgresFlags: [
          '-c',
          'shared_preload_libraries=pg_stat_statements',
          '-c',
          'pg_stat_statements.track=all',
          '-c',
          'track_functions=all',
        ],
      });
      preload = true;
    } catch (err) {
      log(
        'postgres would not start with pg_stat_statements preloaded; counting statements from the server log instead:',
        err.message.split('\n')[0],
      );
    }
  }
  server ??= await startEmbeddedPostgres({ onLog, postgresFlags: ['-c', 'track_functions=all'] });
  cleanups.push(() => server.stop());
  log(`postgres on port ${server.port}`);

  const admin = new pg.Pool({ connectionString: server.url, max: 4 });
  // At shutdown the server may end a connection the pool is still letting go of.
  admin.on('error', () => {});
  cleanups.push(() => admin.end());
  const version = (await admin.query('SHOW server_version')).rows[0].server_version;
  let pgss = false;
  if (preload) {
    const avail = await admin.query(
      "SELECT name, default_version FROM pg_available_extensions WHERE name = 'pg_stat_statements'",
    );
    if (avail.rows.length) {
      await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
      pgss = true;
    }
  }
  // The bench's own statistics queries run as another role, so filtering on the runners'
  // role (postgres) leaves exactly what leasejob sent.
  await admin.query("CREATE ROLE bench_observer LOGIN SUPERUSER PASSWORD 'bench-observer'");
  const observerUrl = new URL(server.url);
  observerUrl.username = 'bench_observer';
  observerUrl.password = 'bench-observer';
  const observer = new pg.Pool({ connectionString: observerUrl.toString(), max: 2 });
  observer.on('error', () => {});
  cleanups.push(() => observer.end());

  // The bench's own code cache directory: another leasejob on the machine (an older build, a
  // test run) cannot then touch the caches of what is measured.
  const env = {
    ...process.env,
    LEASEJOB_DATABASE_URL: server.url,
    LEASEJOB_COMPILE_CACHE: process.env.LEASEJOB_COMPILE_CACHE || path.join(tmp, 'compile-cache'),
  };
  delete env.DATABASE_URL;
  delete env.LEASEJOB_LOG_LEVEL;
  delete env.NODE_OPTIONS;
  const migrate = async (schema) => {
    const r = await timed(NODE, [BIN, 'migrate', '--schema', schema, '--log-level', 'warn'], { env });
    if (r.code !== 0) throw new Error(`leasejob migrate --schema ${schema} exited ${r.code}: ${r.stderr}`);
    return r.ms;
  };
  const migrateMs = await migrate('bench');
  log(`migrated schema bench with the built CLI in ${Math.round(migrateMs)} ms`);

  let seq = 0;
  const ctx = {
    quick: opts.quick,
    tmp,
    url: server.url,
    schema: 'bench',
    env,
    report,
    log,
    admin,
    observer,
    pgss,
    serverLog,
    scale: opts.scale === undefined ? undefined : Number(opts.scale),
    herdSizes: opts['herd-sizes']
      .split(',')
      .map(Number)
      .filter((n) => n > 0),
    etcd: undefined,
    pgbouncer: undefined,
    /** NODE_EXTRA_CA_CERTS as the bench found it (removed for everything it measures). */
    extraCaCerts,
    migrate,
    /** Iterations: full run vs --quick. */
    n: (full, quick) => (opts.quick ? quick : full),
    uid: (prefix) => `${prefix}-${process.pid}-${++seq}`,
  };

  if (selected.includes('overhead')) {
    const e = await startEtcd(log);
    if (e.note) {
      log(`etcd: ${e.note}`);
      report.note(`etcd baseline skipped: ${e.note}`);
    } else {
      log(`${e.version} on ${e.endpoint}${e.installed ? ' (installed just now with apt-get)' : ''}`);
      ctx.etcd = e;
      cleanups.push(() => e.stop());
    }
  }

  if (selected.includes('overhead') || selected.includes('herd')) {
    const b = await startBenchPgbouncer(server.url, log);
    if (b.note) {
      log(b.note);
      report.note(`rows through pgbouncer (overhead, herd) skipped: ${b.note}`);
    } else {
      log(`${b.version} on ${new URL(b.url).port}${b.installed ? ' (installed just now with apt-get)' : ''}`);
      // Contenders through it: the bench's environment with its URL.
      ctx.pgbouncer = { ...b, env: { ...env, LEASEJOB_DATABASE_URL: b.url } };
      cleanups.push(() => b.stop());
    }
  }

  // A bench that could not measure (it threw) prints no figure of its own and makes the whole
  // run exit non-zero, said last and loudly: a number from a broken trial is worse than none.
  const failures = [];
  for (const name of BENCHES) {
    if (!selected.includes(name)) continue;
    log(`--- ${name}`);
    const t = performance.now();
    const mod = await import(`./benches/${name}.mjs`);
    try {
      await mod.run(ctx);
    } catch (err) {
      log(`${name} failed:`, err.stack ?? err);
      report.note(`${name} FAILED: ${err.message}`);
      failures.push(`${name}: ${err.message}`);
    }
    log(`--- ${name} done in ${((performance.now() - t) / 1000).toFixed(1)} s`);
  }

  const meta = {
    started: started.toISOString(),
    finished: new Date().toISOString(),
    quick: opts.quick,
    only: selected,
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model,
    memGiB: Math.round(os.totalmem() / 2 ** 30),
    loadavgStart: loadStart,
    loadavgEnd: os.loadavg(),
    postgres: version,
    postgresFlags: 'fsync=off synchronous_commit=off full_page_writes=off (throwaway server, as in the test suite)',
    statementCounting: pgss
      ? 'pg_stat_statements (track=all; toplevel=true rows are what leasejob sent)'
      : 'server log (log_statement=all)',
    etcd: ctx.etcd?.version ?? null,
    pgbouncer: ctx.pgbouncer?.version ?? null,
    nodeExtraCaCerts: extraCaCerts ? `${extraCaCerts} (removed from the environment of everything measured)` : null,
    gitHead: spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).stdout.trim() || null,
  };
  console.log('');
  console.log(
    `leasejob bench ${opts.quick ? '(--quick: indicative only) ' : ''}node ${process.version}, ${meta.cpus} cpus, PostgreSQL ${version}, load ${loadStart.map((x) => x.toFixed(2)).join(' ')} -> ${meta.loadavgEnd.map((x) => x.toFixed(2)).join(' ')}`,
  );
  console.log('');
  console.log(report.table());
  if (report.extra.startCost) {
    console.log('');
    console.log(report.extra.startCostText);
  }
  const out = path.resolve(opts.out);
  report.write(out, meta);
  console.log('');
  console.log(`JSON: ${out}`);
  if (failures.length > 0) {
    console.error(`\nBENCH FAILED: ${failures.length} bench(es) could not measure:`);
    for (const f of failures) console.error(`  ${f}`);
    process.exitCode = 1;
  }
} finally {
  await cleanup();
}
