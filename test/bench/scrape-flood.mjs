#!/usr/bin/env node
// A scrape flood against a real `leasejob exporter` on each store (issue 44): how long one
// Prometheus-like scrape takes alone, and beside 2,000 concurrent `GET /metrics` (every
// connection opened first, then every request sent at once), with the flood's last answer.
// Each store's figures are taken in the same run, alternating alone and flooded; with
// `--baseline <checkout>` the other checkout's built exporter (main, before coalescing) is
// measured the same way, interleaved. Not part of `npm test`; figures go to docs/performance.md.
//
//   node test/bench/scrape-flood.mjs [--requests 2000] [--rounds 3] [--jobs 2000] [--baseline /work/main]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startEmbeddedPostgres } from '../helpers/embedded-pg.mjs';
import { seedJobs } from './seed.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? dflt : process.argv[i + 1];
};
const REQUESTS = Number(arg('requests', 2_000));
const ROUNDS = Number(arg('rounds', 3));
const JOBS = Number(arg('jobs', 2_000));
const BASELINE = arg('baseline', undefined);
const env = Object.fromEntries(
  Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|LEASEJOB_|PG[A-Z]+$)/.test(k)),
);

function cli(root, args) {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [path.join(root, 'bin', 'leasejob.js'), ...args], { env, stdio: 'ignore' });
    p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`leasejob ${args[0]}: exit ${code}`))));
  });
}

/** The exporters running, stopped on SIGINT or SIGTERM with the server (an interrupted bench leaves nothing). */
const running = new Set();

function startExporter(root, conn) {
  return new Promise((resolve, reject) => {
    const p = spawn(
      process.execPath,
      [path.join(root, 'bin', 'leasejob.js'), 'exporter', ...conn, '--port', '0', '--host', '127.0.0.1'],
      {
        env,
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let err = '';
    p.stderr.on('data', (d) => {
      err += d;
      const m = /"msg":"exporter listening"[^\n]*"port":(\d+)|"port":(\d+)[^\n]*"msg":"exporter listening"/.exec(err);
      if (m) resolve({ port: Number(m[1] ?? m[2]), stop: () => p.kill('SIGTERM') });
    });
    running.add(p);
    p.on('exit', () => running.delete(p));
    p.on('exit', (code) => reject(new Error(`exporter exited ${code}: ${err.slice(-500)}`)));
  });
}

const connect = (port) =>
  new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port }, () => resolve(s));
    s.once('error', reject);
  });

/**
 * One GET /metrics on an established socket (a flood request, plain as a naive client asks), or
 * on a new one asking for gzip as Prometheus does: ms to the end of its body.
 */
function get(port, sock) {
  const t0 = performance.now();
  const how = sock ? { createConnection: () => sock } : { agent: false, headers: { 'accept-encoding': 'gzip' } };
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/metrics', ...how }, (res) => {
      res.resume();
      res.on('end', () =>
        res.statusCode === 200 ? resolve(performance.now() - t0) : reject(new Error(`status ${res.statusCode}`)),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

async function measure(port) {
  const alone = await get(port);
  const socks = await Promise.all(Array.from({ length: REQUESTS }, () => connect(port)));
  const t0 = performance.now();
  const flood = socks.map((s) => get(port, s));
  const legit = await get(port); // sent right after the flood's requests, on a connection of its own
  await Promise.all(flood);
  return { alone, legit, floodEnd: performance.now() - t0 };
}

const median = (l) => [...l].sort((a, b) => a - b)[Math.floor(l.length / 2)];
const fmt = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`);

async function main() {
  const db = await startEmbeddedPostgres();
  const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-scrape-flood-'));
  for (const sig of ['SIGINT', 'SIGTERM'])
    process.once(sig, async () => {
      for (const p of running) p.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
      await db.stop();
      process.exit(130);
    });
  try {
    const schema = 'bench_flood';
    await cli(ROOT, ['migrate', '--database-url', db.url, '--schema', schema]);
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    await seedJobs(pool, schema, { jobs: JOBS, events: JOBS * 20 });
    await pool.end();
    const state = path.join(dir, 'state.db');
    for (let i = 0; i < 20; i++)
      await cli(ROOT, ['run', '--state-file', state, '--name', `e${i}`, '--window', 'w', '--', 'true']);
    const stores = [
      [`PostgreSQL, ${JOBS} jobs`, ['--database-url', db.url, '--schema', schema]],
      ['embedded store, 20 jobs', ['--state-file', state]],
    ];
    const builds = [['this checkout', ROOT], ...(BASELINE ? [['baseline', BASELINE]] : [])];
    for (const [store, conn] of stores) {
      const rows = new Map(builds.map(([b]) => [b, []]));
      for (let r = 0; r < ROUNDS; r++)
        for (const [b, root] of r % 2 === 0 ? builds : [...builds].reverse()) {
          const ex = await startExporter(root, conn);
          try {
            const m = await measure(ex.port);
            rows.get(b).push(m);
            console.log(
              `  ${store}, ${b}, round ${r + 1}: alone ${fmt(m.alone)}, beside the flood ${fmt(m.legit)}, flood ${fmt(m.floodEnd)}`,
            );
          } finally {
            ex.stop();
          }
        }
      for (const [b, l] of rows)
        console.log(
          `${store}, ${b}: one scrape alone ${fmt(median(l.map((x) => x.alone)))}, beside ${REQUESTS} concurrent ` +
            `${fmt(median(l.map((x) => x.legit)))}, the flood's last answer ${fmt(median(l.map((x) => x.floodEnd)))} ` +
            `(medians of ${l.length})`,
        );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await db.stop();
  }
}

await main();
