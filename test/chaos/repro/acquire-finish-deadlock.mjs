// Regression check for a product bug the chaos suite found (fixed in af3ea98; exits 0 since):
// acquire() and finish() locked the `jobs` row and the `leases` row in opposite orders
// (acquire: jobs through its registry upsert, then leases; finish: leases FOR UPDATE, then jobs
// through record_event), so under contention
// PostgreSQL aborted one of them with 40P01. A contender's runner then exited 70 ("internal
// error: deadlock detected"); a holder's finish logged "could not record outcome and release".
//
//   npm run build && node test/chaos/repro/acquire-finish-deadlock.mjs [connections=40] [seconds=20] [same|mixed]
//
// 40 connections on one job, each calling acquire() the way `leasejob run` does (a window, lock
// timeout 500 ms); whoever wins holds the lease 20 ms and calls finish(); the others record a
// busy-skip event, as the runner does. `mixed` gives half of them another --ttl (two runner
// configurations on one job, as during a rolling change): at 3e5cacc acquire() skipped the
// registry upsert when nothing changed, so `same` no longer deadlocked there, `mixed` still did.
// Prints the outcome counts and the first deadlock report; exits 1 when a deadlock occurred.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import pg from 'pg';
import { startEmbeddedPostgres } from '../../helpers/embedded-pg.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../..');
const connections = Number(process.argv[2] ?? 40);
const seconds = Number(process.argv[3] ?? 20);
const mixed = process.argv[4] === 'mixed';
const server = await startEmbeddedPostgres();
try {
  execFileSync(process.execPath, [path.join(ROOT, 'bin/leasejob.js'), 'migrate', '--database-url', server.url, '--schema', 'lj', '--log-level', 'warn']);
  const spec = JSON.stringify({ schedule: null, tz: 'UTC', window_mode: 'literal', window_format: null, window_offset: null, max_delay_ms: null, alert_after_ms: null });
  const counts = { acquired: 0, busy: 0 };
  let first;
  const until = Date.now() + seconds * 1000;
  await Promise.all(Array.from({ length: connections }, async (_, i) => {
    const c = new pg.Client({ connectionString: server.url });
    await c.connect();
    while (Date.now() < until) {
      const owner = `repro:${i}:${Math.random().toString(16).slice(2, 10)}`;
      try {
        const ttl = mixed && i % 2 === 1 ? 4000 : 3000;
        const { rows } = await c.query('SELECT * FROM lj.acquire($1, $2, $5, 1000, $3, NULL, false, NULL, now(), $4, 500)', ['job', owner, `w${i % 3}`, spec, ttl]);
        if (rows[0].outcome === 'acquired') {
          counts.acquired += 1;
          await new Promise((r) => setTimeout(r, 20));
          await c.query("SELECT * FROM lj.finish($1, $2, $3, $4, 'failed', 1, now(), '{}')", ['job', owner, rows[0].generation, `w${i % 3}`]);
        } else {
          counts.busy += 1;
          await c.query("SELECT lj.record_event('job', 'busy-skip', NULL, $1, NULL, now(), '{}')", [owner]);
        }
      } catch (err) {
        const key = `${err.code} ${err.message}${err.where?.includes('finish(') ? ' (in finish)' : err.where?.includes('acquire(') ? ' (in acquire)' : ''}`;
        counts[key] = (counts[key] ?? 0) + 1;
        if (err.code === '40P01') first ??= `${err.detail}\n${err.where?.split('\n').at(-1)}`;
      }
    }
    await c.end();
  }));
  console.log(counts);
  if (first) console.log(`first deadlock:\n${first}`);
  process.exitCode = first ? 1 : 0;
} finally {
  await server.stop();
}
