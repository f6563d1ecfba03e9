// PgBouncer in transaction pooling mode in front of a PostgreSQL, for the pgbouncer deploy test
// and the chaos harness's pgbouncer host. Each caller says how clients authenticate, how many
// server connections a pool has and what else goes in the [pgbouncer] section.
import { spawn, spawnSync } from 'node:child_process';
import { accessSync, chmodSync, chownSync, constants, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort } from './embedded-pg.mjs';
import { stopProcess } from './proc.mjs';

/** Log kept for log(): PgBouncer logs every connection unless told not to, and a chaos round makes many. */
const LOG_LIMIT_CHARS = 1 << 20;

/** @returns {string | undefined} an executable pgbouncer on PATH or in the usual places (Debian: apt-get install -y pgbouncer) */
export function pgbouncerBinary() {
  const dirs = [
    ...(process.env.PATH ?? '').split(path.delimiter),
    '/usr/sbin',
    '/usr/local/sbin',
    '/usr/bin',
    '/usr/local/bin',
  ];
  for (const dir of dirs.filter(Boolean)) {
    const file = path.join(dir, 'pgbouncer');
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

/**
 * PgBouncer refuses to run as root: as root, it runs as `postgres` (the user the test servers
 * run as), which then owns its work directory.
 * @returns {{ uid: number, gid: number } | undefined}
 */
function unprivilegedUser() {
  if (process.getuid?.() !== 0) return undefined;
  /** @param {string} flag */
  const id = (flag) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
  const uid = id('-u');
  if (!Number.isInteger(uid) || uid <= 0)
    throw new Error('running as root, but there is no `postgres` user to run pgbouncer as');
  return { uid, gid: id('-g') };
}

/** @param {string} s */
const quote = (s) => `"${s.replace(/"/g, '""')}"`;

/**
 * @typedef {object} PgbouncerOptions
 * @property {string} binary from pgbouncerBinary()
 * @property {string | URL} target the server; clients use its user and password, which the userlist holds in plain text
 * @property {'trust' | 'plain' | 'scram-sha-256'} authType how clients authenticate to PgBouncer ('plain': a cleartext password, as the bench's server asks)
 * @property {number} poolSize default_pool_size: server connections per user and database
 * @property {string} [alias] the database name clients connect to (default: the target's database)
 * @property {boolean} [serverCredentials] put the target's user and password in the [databases] line (default: PgBouncer logs in with the client's, from the userlist)
 * @property {string[]} [extraIni] more [pgbouncer] lines
 * @property {number} [startTimeoutMs] how long a query through it may take to first answer (default 30 s)
 */

/**
 * Start PgBouncer on a free port of 127.0.0.1 and wait until a query through it answers.
 * `url` is the target's URL pointing at PgBouncer; `log()` is its output so far; `stop()` ends it
 * (SIGINT, SIGKILL after 10 s) and removes its work directory.
 * @param {PgbouncerOptions} opts
 * @returns {Promise<{ url: string, log: () => string, stop: () => Promise<void> }>}
 */
export async function startPgbouncer({
  binary,
  target,
  authType,
  poolSize,
  alias,
  serverCredentials = false,
  extraIni = [],
  startTimeoutMs = 30_000,
}) {
  const server = new URL(target);
  const user = decodeURIComponent(server.username);
  const password = decodeURIComponent(server.password);
  const database = server.pathname.slice(1) || 'postgres';
  const name = alias ?? database;
  const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-pgbouncer-'));
  const port = await freePort();
  const ini = path.join(dir, 'pgbouncer.ini');
  // A server with trust authentication has no password: `password=` with nothing after it is a
  // syntax error to PgBouncer.
  const login = serverCredentials ? ` user=${user}${password ? ` password=${password}` : ''}` : '';
  writeFileSync(path.join(dir, 'userlist.txt'), `${quote(user)} ${quote(password)}\n`, { mode: 0o600 });
  writeFileSync(
    ini,
    [
      '[databases]',
      `${name} = host=${server.hostname} port=${server.port || 5432} dbname=${database}${login}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      `auth_type = ${authType}`,
      `auth_file = ${path.join(dir, 'userlist.txt')}`,
      // Transaction pooling: the mode that breaks session state, the one leasejob claims to survive.
      'pool_mode = transaction',
      'max_client_conn = 200',
      `default_pool_size = ${poolSize}`,
      ...extraIni,
      '',
    ].join('\n'),
    { mode: 0o600 },
  );
  const as = unprivilegedUser();
  if (as) {
    chmodSync(dir, 0o700);
    for (const f of ['', 'userlist.txt', 'pgbouncer.ini']) chownSync(path.join(dir, f), as.uid, as.gid);
  }
  const proc = spawn(binary, [ini], { ...(as ?? {}), cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  /** @param {Buffer} d */
  const keep = (d) => {
    if (log.length < LOG_LIMIT_CHARS) log += d;
  };
  proc.stdout.on('data', keep);
  proc.stderr.on('data', keep);
  const running = () => proc.exitCode === null && proc.signalCode === null;

  const url = new URL(server);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  url.pathname = `/${name}`;
  url.search = '';
  url.hash = '';
  try {
    const started = Date.now();
    for (;;) {
      if (!running())
        throw new Error(
          `pgbouncer exited ${proc.exitCode ?? proc.signalCode} while starting: ${log.trim().split('\n').slice(-5).join(' | ')}`,
        );
      if (await answers(url.toString())) break;
      if (Date.now() - started > startTimeoutMs)
        throw new Error(
          `pgbouncer did not answer within ${startTimeoutMs} ms: ${log.trim().split('\n').slice(-5).join(' | ')}`,
        );
      await new Promise((r) => setTimeout(r, 200));
    }
  } catch (err) {
    proc.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    url: url.toString(),
    log: () => log,
    stop: async () => {
      // Its stdout and stderr are pipes read to the end: they close when it exits.
      await stopProcess(proc, 10_000, 'SIGINT');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** @param {string} url */
async function answers(url) {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  try {
    await c.connect();
    await c.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await c.end().catch(() => {});
  }
}
