// The system under test's surroundings: our own PostgreSQL (so a fault can restart it), the
// chaos database and schema, the protected tables, and the simulated hosts runners live on.
import { execFile } from 'node:child_process';
import { renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { startEmbeddedPostgres } from '../../helpers/embedded-pg.mjs';
import { faketimeEnv, faketimeLibrary } from '../../helpers/faketime.mjs';
import { pgbouncerBinary, startPgbouncer } from '../../helpers/pgbouncer.mjs';
import { startProxy } from '../../helpers/proxy.mjs';
import { startFailoverCluster, startLocalServer } from '../../helpers/replication.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../..');
export const BIN = path.join(ROOT, 'bin', 'leasejob.js');
export const WRITER = path.join(ROOT, 'test', 'fixtures', 'chaos-writer.mjs');

const run = promisify(execFile);

/** Run the built CLI to completion (migrate); throws with its output on a non-zero exit. */
async function cli(args) {
  try {
    return await run(process.execPath, [BIN, ...args], { cwd: ROOT, timeout: 60_000 });
  } catch (err) {
    throw new Error(`leasejob ${args[0]} failed (${err.code}): ${err.stderr || err.message}`, { cause: err });
  }
}

/**
 * Start PostgreSQL and prepare the chaos database.
 * - track_commit_timestamp: the fencing check compares real commit times (see checks.mjs);
 *   it is a server-start setting, hence a server flag (kept by every restart).
 * - a database of our own with synchronous_commit back on: the test server runs with it off
 *   for speed, and an immediate restart is a crash, which would then lose acknowledged
 *   commits (a lease acquisition among them, and a generation would be handed out twice).
 *   That is a broken database, not a fault leasejob is meant to survive.
 * - `isolation` (run.mjs --isolation): the database's default_transaction_isolation, set before
 *   migrating, so that every connection to it uses it (runners, children, PgBouncer, checks).
 */
export async function startCluster({ schema, isolation, failover = false, restoreInPlace = false, dbClock }) {
  // --failover: Debian postgresql-15 streaming replication behind one moving address, so that
  // the `failover` fault can promote the standby (test/helpers/replication.mjs).
  // --restore-in-place: a lone Debian postgresql-15 server that can take a physical backup and
  // start it in its own place (same port, system identifier and timeline).
  const server = failover
    ? await startFailoverCluster({ conf: ['track_commit_timestamp = on'] })
    : restoreInPlace
      ? await startLocalServer({ conf: ['track_commit_timestamp = on', 'max_connections = 300'] })
      : await startEmbeddedPostgres({
          postgresFlags: ['-c', 'track_commit_timestamp=on'],
          // --db-clock-step: the server's wall clock read from a file (libfaketime), which the
          // `db-clock-step` fault rewrites.
          ...(dbClock ? { env: faketimeEnv(dbClock.library, dbClock.file) } : {}),
        });
  try {
    return { ...(await prepare(server, schema, isolation)), dbClock };
  } catch (err) {
    await server.stop().catch(() => {});
    throw err;
  }
}

async function prepare(server, schema, isolation = 'read committed') {
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query('CREATE DATABASE chaos');
  await admin.query('ALTER DATABASE chaos SET synchronous_commit = on');
  await admin.query(`ALTER DATABASE chaos SET default_transaction_isolation = ${admin.escapeLiteral(isolation)}`);
  await admin.end();

  const url = new URL(server.url);
  url.pathname = '/chaos';
  const directUrl = url.toString();
  await cli(['migrate', '--database-url', directUrl, '--schema', schema, '--log-level', 'warn']);

  const pool = new pg.Pool({
    connectionString: directUrl,
    max: 4,
    connectionTimeoutMillis: 3_000,
    idleTimeoutMillis: 1_000,
  });
  pool.on('error', () => {});
  const s = `"${schema}"`;
  const check = await pool.query(
    "SELECT current_setting('track_commit_timestamp') AS ts, current_setting('synchronous_commit') AS sc, current_setting('default_transaction_isolation') AS iso",
  );
  if (check.rows[0].ts !== 'on' || check.rows[0].sc !== 'on' || check.rows[0].iso !== isolation)
    throw new Error(`chaos database settings not applied: ${JSON.stringify(check.rows[0])}`);
  // The protected table: one row per unit of a window, the generation that wrote it and when
  // (clock_timestamp() at insert; the exact commit time comes from pg_xact_commit_timestamp).
  await pool.query(`CREATE TABLE ${s}.chaos_units (
    job text NOT NULL, window_key text NOT NULL, unit integer NOT NULL, generation bigint NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job, window_key, unit))`);
  // Each child's own end, on the database clock, when it exits normally or on SIGTERM.
  await pool.query(`CREATE TABLE ${s}.chaos_child_ends (
    job text NOT NULL, window_key text NOT NULL, generation bigint NOT NULL, pid integer NOT NULL,
    reason text NOT NULL, exit_code integer, ended_at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  // The harness reads its own wall clock as the database clock (same kernel clock, no faketime
  // here); measured once so the report can say so.
  const t0 = Date.now();
  const { rows } = await pool.query('SELECT clock_timestamp() AS t');
  const clockOffsetMs = Math.round(rows[0].t.getTime() - (t0 + Date.now()) / 2);

  return {
    server,
    directUrl,
    pool,
    schema,
    clockOffsetMs,
    restart: (mode) => server.restart(mode),
    failover: server.failover ? (o) => server.failover(o) : undefined,
    restoreInPlace: server.backup ? (o) => restoreInPlace(server, pool, schema, o) : undefined,
    stop: async () => {
      await pool.end().catch(() => {});
      await server.stop();
    },
  };
}

/**
 * History lost in place: a physical backup (pg_basebackup) taken while the clients work, `holdMs`
 * more of their work, then the server crashed and the backup started in its place, behind the
 * same address. Everything committed after the backup is gone, and nothing tells the clients:
 * same system identifier, same timeline. Times are the harness's (the database's) clock.
 */
async function restoreInPlace(server, pool, schema, { holdMs }) {
  // Events committed between the end of the backup and the crash: at least that much is lost.
  const events = () =>
    pool.query(`SELECT count(*)::int AS n FROM "${schema}".events`).then(
      (r) => r.rows[0].n,
      () => undefined,
    );
  const backupAt = Date.now();
  const dir = await server.backup();
  const backedUpAt = Date.now();
  const before = await events();
  await new Promise((r) => setTimeout(r, holdMs));
  const atCrash = await events();
  const downAt = Date.now();
  await server.startFrom(dir);
  const lostEvents = before === undefined || atCrash === undefined ? undefined : atCrash - before;
  return { backupAt, backedUpAt, downAt, upAt: Date.now(), lostEvents };
}

/**
 * Simulated hosts: each has its own route to the database (direct, a partitionable proxy, or
 * PgBouncer) and possibly its own wall clock (libfaketime reading an offset file on every call,
 * the monotonic clock left alone, as NTP stepping the clock of one machine would do).
 */
export async function startHosts({ cluster, workDir, notes }) {
  const hosts = [{ name: 'direct', url: cluster.directUrl, env: {} }];
  const ft = faketimeLibrary();
  if (!ft)
    notes.push('faketime: libfaketime not found (Debian package `faketime`): clock-skew and clock-jump faults skipped');
  const proxied = [
    { name: 'net-1' },
    { name: 'net-2' },
    ...(ft
      ? [
          { name: 'clock-1', clock: true },
          { name: 'clock-2', clock: true },
        ]
      : []),
  ];
  for (const h of proxied) {
    const proxy = await startProxy(cluster.directUrl);
    const host = { name: h.name, url: proxy.url(cluster.directUrl), proxy, env: {} };
    if (h.clock) {
      host.clockFile = path.join(workDir, `${h.name}.faketime`);
      host.clockOffsetS = 0;
      writeFileSync(host.clockFile, '+0\n');
      host.env = faketimeEnv(ft, host.clockFile);
    }
    hosts.push(host);
  }
  const bouncerBin = pgbouncerBinary();
  let bouncer;
  if (!bouncerBin) {
    notes.push('pgbouncer: not installed (Debian package `pgbouncer`): the pgbouncer host is skipped');
  } else {
    try {
      // The runners of one host through PgBouncer in transaction mode: the holder's session
      // check cannot work there, and only overdue renewals reveal a crashed owner.
      bouncer = await startPgbouncer({
        binary: bouncerBin,
        target: cluster.directUrl,
        authType: 'trust',
        serverCredentials: true,
        poolSize: 10,
        extraIni: [
          'server_reset_query =',
          'ignore_startup_parameters = extra_float_digits,options',
          // Servers die on a PostgreSQL restart: let PgBouncer retry them quickly.
          'server_login_retry = 1',
        ],
        startTimeoutMs: 10_000,
      });
      hosts.push({ name: 'bouncer', url: bouncer.url, env: {}, bouncer: true });
    } catch (err) {
      notes.push(`pgbouncer: could not start (${err.message}): the pgbouncer host is skipped`);
    }
  }
  return {
    hosts,
    byName: (name) => hosts.find((h) => h.name === name),
    setClock(host, offsetS) {
      host.clockOffsetS = offsetS;
      // Written aside and renamed: libfaketime rereads the file on every call and must never
      // see it empty halfway through a write (that would be a jump to the real time and back).
      writeFileSync(`${host.clockFile}.new`, `${offsetS >= 0 ? '+' : ''}${offsetS}\n`);
      renameSync(`${host.clockFile}.new`, host.clockFile);
    },
    healAll() {
      for (const h of hosts) if (h.proxy && h.proxy.state !== 'open') h.proxy.heal();
    },
    resetClocks() {
      for (const h of hosts) if (h.clockFile && h.clockOffsetS !== 0) this.setClock(h, 0);
    },
    stop: async () => {
      for (const h of hosts) await h.proxy?.close();
      await bouncer?.stop();
    },
  };
}
