#!/usr/bin/env node
// A leasejob child in Node: processes N units, each in one fenced transaction, so a run that
// lost its lease while paused cannot write after the new owner took over.
//
//   leasejob run --name nightly-units --window 2026-09-25 --pass-database-url \
//     -- node examples/node-fenced-worker.mjs 50
//
// Layers, outermost first: leasejob stops this process when the lease is in doubt (SIGTERM,
// then SIGKILL); assert_lease() refuses a write from a stale generation (SQLSTATE LJ001); the
// primary key on (idempotency_key, unit) makes a repeated unit a no-op. Run it again for the
// same occurrence and it skips what is already there. It needs this table on its search_path:
//
//   CREATE TABLE worker_units (
//     idempotency_key text   NOT NULL,   -- <job>:<window>, the same on every attempt
//     unit            integer NOT NULL,
//     fence_token     bigint NOT NULL,   -- which ownership wrote it
//     done_at         timestamptz NOT NULL DEFAULT now(),
//     PRIMARY KEY (idempotency_key, unit)
//   );
//
// Environment (from leasejob run): FENCE_TOKEN, IDEMPOTENCY_KEY, LEASEJOB_NAME, LEASEJOB_WINDOW,
// LEASEJOB_OWNER, LEASEJOB_SCHEMA (default leasejob); DATABASE_URL only with
// --pass-database-url, otherwise the PG* variables. WORKER_UNITS may replace the argument.
// Exit: 0 all units done; 75 the fence refused a write (lost lease: same code as leasejob);
// 143 stopped by SIGTERM between units (never 0: a stopped run must leave its window open).
import { setTimeout as delay } from 'node:timers/promises';
import pg from 'pg';

const FENCE_REFUSED = 'LJ001';

const env = process.env;
for (const name of ['FENCE_TOKEN', 'IDEMPOTENCY_KEY', 'LEASEJOB_NAME']) {
  if (!env[name]) {
    process.stderr.write(`node-fenced-worker: ${name} is not set; run me under \`leasejob run\`\n`);
    process.exit(64);
  }
}
const units = Number(process.argv[2] ?? env.WORKER_UNITS ?? 10);
const unitMs = Number(env.WORKER_UNIT_MS ?? 0);

// Stop between units: the unit in flight finishes (or fails) as one transaction.
const stop = new AbortController();
process.once('SIGTERM', () => stop.abort());

// No DATABASE_URL: pg reads PGHOST, PGUSER, PGPASSWORD, ... like psql.
const client = new pg.Client(env.DATABASE_URL ? { connectionString: env.DATABASE_URL } : {});
await client.connect();
const schema = client.escapeIdentifier(env.LEASEJOB_SCHEMA || 'leasejob');
const fence = [env.LEASEJOB_NAME, env.FENCE_TOKEN];

async function processUnit(unit) {
  await client.query('BEGIN');
  try {
    // First statement: locks the lease row FOR SHARE until COMMIT, so no takeover can land
    // between this check and the write. Keep the transaction short: the owner's own renewal
    // waits on this lock.
    await client.query(`SELECT ${schema}.assert_lease($1, $2)`, fence);
    // ... the unit's real work goes here, in the same transaction ...
    await client.query(
      `INSERT INTO worker_units (idempotency_key, unit, fence_token) VALUES ($1, $2, $3)
       ON CONFLICT (idempotency_key, unit) DO NOTHING`,
      [env.IDEMPOTENCY_KEY, unit, env.FENCE_TOKEN],
    );
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

let exitCode = 0;
try {
  for (let unit = 1; unit <= units; unit += 1) {
    if (stop.signal.aborted) {
      process.stderr.write(`node-fenced-worker: stopped by SIGTERM before unit ${unit}\n`);
      exitCode = 143;
      break;
    }
    await processUnit(unit);
    if (unitMs > 0) await delay(unitMs, undefined, { signal: stop.signal }).catch(() => {});
  }
} catch (err) {
  if (err.code !== FENCE_REFUSED) throw err;
  process.stderr.write(`node-fenced-worker: ${err.message}\n`);
  // Outside the refused transaction (inside, it would be rolled back with the write). Best
  // effort: the refusal stands whether or not this role may call record_event.
  await client
    .query(`SELECT ${schema}.record_event($1, 'fence-refused', $2, $3, $4, now(), $5)`, [
      env.LEASEJOB_NAME,
      env.LEASEJOB_WINDOW ?? null,
      env.LEASEJOB_OWNER ?? null,
      env.FENCE_TOKEN,
      JSON.stringify({ message: err.message, by: 'node-fenced-worker' }),
    ])
    .catch(() => {});
  exitCode = 75;
} finally {
  await client.end().catch(() => {});
}
process.exit(exitCode);
