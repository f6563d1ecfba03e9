// leasejob through pgbouncer in transaction pooling mode, in front of the suite's PostgreSQL:
// migrate, contention on one window, renewals, and the fence in the child's own transaction.
// Every statement may land on a different server connection, and only two exist, so anything
// that relied on session state (a session advisory lock, a SET, a named prepared statement)
// would fail here. Skipped, with the reason printed, when pgbouncer is not installed
// (Debian: apt-get install pgbouncer).
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ROOT, fixture, logLines, runCli, startCli } from '../helpers/cli.js';
import { newSchemaName } from '../helpers/db.js';
import { pgbouncerBinary, startPgbouncer, type Pgbouncer } from '../helpers/pgbouncer.mjs';
import { tempDirs } from '../helpers/temp.js';
import { migrate } from '../../src/store/postgres/migrate.js';

const FENCE_SQL = path.join(ROOT, 'sql', '002_assert_lease.sql');
const FENCED_CHILD = path.join(ROOT, 'test', 'deploy', 'fixtures', 'fenced-through-pooler.mjs');
// Generous: a busy 2-core machine running PostgreSQL, pgbouncer and several runners at once.
const WAIT_LIMIT_MS = 30_000;

const PGBOUNCER = pgbouncerBinary();
if (!PGBOUNCER) {
  console.log('skipping the pgbouncer tests: no pgbouncer binary on PATH or in /usr/sbin (Debian: apt-get install -y pgbouncer)');
}

/** pgbouncer in front of the suite's server, clients connecting to database `leasejob`. */
function startBouncer(serverUrl: string): Promise<Pgbouncer> {
  return startPgbouncer({
    binary: PGBOUNCER!,
    target: serverUrl,
    alias: 'leasejob',
    // The client side authenticates with SCRAM against the plaintext userlist; pgbouncer logs in
    // to the server with the same password (the suite's server uses password authentication).
    authType: 'scram-sha-256',
    // Two server connections for every client: statements of different runners interleave
    // on the same backends, which is what transaction pooling does in production.
    poolSize: 2,
    extraIni: ['ignore_startup_parameters = extra_float_digits', 'log_connections = 0', 'log_disconnections = 0'],
    startTimeoutMs: WAIT_LIMIT_MS,
  });
}

describe.skipIf(!PGBOUNCER)('through pgbouncer in transaction pooling mode', () => {
  let bouncer: Pgbouncer;
  let direct: pg.Pool;
  let schema: string;
  let tmp: string;
  // Made in beforeAll, so nothing is made when the block is skipped; removed after the afterAll below.
  const newTmp = tempDirs('leasejob-pooled-');
  const env = (): Record<string, string | undefined> => ({ LEASEJOB_DATABASE_URL: bouncer.url, DATABASE_URL: undefined, JOB_NAME: undefined });

  beforeAll(async () => {
    const serverUrl = inject('databaseUrl');
    bouncer = await startBouncer(serverUrl);
    direct = new pg.Pool({ connectionString: serverUrl, max: 2 });
    tmp = newTmp();
    schema = newSchemaName('pgb');
    await migrate(direct, schema);
  });

  afterAll(async () => {
    await direct?.end();
    await bouncer?.stop();
  });

  it('really pools by transaction: consecutive statements of one client can reach different backends', async () => {
    const c = new pg.Client({ connectionString: bouncer.url });
    await c.connect();
    const other = new pg.Client({ connectionString: bouncer.url });
    await other.connect();
    try {
      const pids = new Set<number>();
      // Hold one backend in a transaction on `other`: `c` must then use the second one.
      const first = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      await other.query('BEGIN');
      await other.query('SELECT pg_backend_pid()');
      for (let i = 0; i < 5; i++) pids.add((await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
      await other.query('COMMIT');
      pids.add(first);
      expect(pids.size).toBeGreaterThan(1);
    } finally {
      await c.end();
      await other.end();
    }
  });

  it('`leasejob migrate` works, and three at once on a new schema all succeed', async () => {
    const fresh = newSchemaName('pgbm');
    const results = await Promise.all([0, 1, 2].map(() => runCli(['migrate', '--schema', fresh], env())));
    for (const r of results) expect(r.exitCode, r.all).toBe(0);
    const { rows } = await direct.query(`SELECT version FROM "${fresh}".migrations ORDER BY version`);
    expect(rows.map((r) => r.version)).toEqual(sqlVersions());
  });

  it('several runners on one window: exactly one child runs, every runner exits 0', async () => {
    const out = path.join(tmp, 'contention.txt');
    writeFileSync(out, '');
    const runners = Array.from({ length: 5 }, () =>
      startCli(['run', '--schema', schema, '--name', 'pooled-contention', '--window', 'w1', '--', process.execPath, fixture('append-pid.mjs'), out, '3000'], env()),
    );
    const results = await Promise.all(runners);
    for (const r of results) expect(r.exitCode, r.all).toBe(0);
    // They did meet: the others found the lease held (a live owner, through the pooler's
    // shared backends) rather than arriving after it was done.
    const messages = results.map((r) => logLines(r.stderr).map((l) => l.msg));
    expect(messages.filter((m) => m.includes('child started'))).toHaveLength(1);
    expect(messages.filter((m) => m.includes('lease busy')).length, messages.join('\n')).toBeGreaterThanOrEqual(1);
    const lines = readFileSync(out, 'utf8').trim().split('\n').filter(Boolean);
    expect(lines).toHaveLength(1);
    const { rows } = await direct.query(
      `SELECT attempts, completed_at FROM "${schema}".windows WHERE job = 'pooled-contention' AND window_key = 'w1'`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].attempts).toBe(1);
    expect(rows[0].completed_at).not.toBeNull();
  });

  it('a run longer than its TTL renews through the pooler and completes its window', async () => {
    // TTL 6 s (renewal every 2 s): a renewal late by a second on a busy machine is still a renewal,
    // where with 3 s it could cost the lease and fail the test for the machine's sake.
    const r = await runCli(
      ['run', '--schema', schema, '--name', 'pooled-renewal', '--window', 'w1', '--ttl', '6s', '--kill-grace', '1s', '--log-level', 'debug',
        '--', process.execPath, fixture('sleep-then.mjs'), '8000', '0'],
      env(),
    );
    expect(r.exitCode, r.all).toBe(0);
    const logs = logLines(r.stderr);
    // Renewal every TTL/3 = 2 s over an 8 s child: about three; two leave room for a slow machine.
    expect(logs.filter((l) => l.msg === 'lease renewed').length, r.stderr).toBeGreaterThanOrEqual(2);
    expect(logs.filter((l) => l.msg === 'lease lost' || l.msg === 'renewal failed')).toEqual([]);
    expect(logs.some((l) => l.msg === 'window completed')).toBe(true);
    const { rows } = await direct.query(
      `SELECT completed_at FROM "${schema}".windows WHERE job = 'pooled-renewal' AND window_key = 'w1'`,
    );
    expect(rows[0]?.completed_at).not.toBeNull();
  });

  it.skipIf(!existsSync(FENCE_SQL))('the child\'s fenced transaction through the pooler: a wrong token is refused, its own commits', async () => {
    await direct.query(`CREATE TABLE IF NOT EXISTS "${schema}".pooled_writes (window_key text NOT NULL, token bigint NOT NULL)`);
    const r = await runCli(
      ['run', '--schema', schema, '--name', 'pooled-fence', '--window', 'w1', '--pass-database-url', '--', process.execPath, FENCED_CHILD],
      env(),
    );
    expect(r.exitCode, r.all).toBe(0);
    const report = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { wrong: string; right: string; token: string };
    expect(report).toMatchObject({ wrong: 'LJ001', right: 'committed' });
    const { rows } = await direct.query(`SELECT token::text FROM "${schema}".pooled_writes WHERE window_key = 'w1'`);
    expect(rows.map((x) => x.token)).toEqual([report.token]);
  });

  it('pgbouncer saw no protocol error from any of it', () => {
    expect(bouncer.log()).not.toMatch(/prepared statement|unsupported startup parameter|protocol error/i);
  });
});

/** The migration versions in sql/, as the migrator lists them. */
function sqlVersions(): number[] {
  return readdirSync(path.join(ROOT, 'sql'))
    .filter((f) => /^\d{3,}_[a-z0-9_]+\.sql$/.test(f))
    .map((f) => Number.parseInt(f, 10))
    .sort((a, b) => a - b);
}
