// PgBouncer in transaction mode in front of the chaos database, for the runners of one
// simulated host: where the holder's session check cannot work and only overdue renewals
// reveal a crashed owner. Optional: absent binary, no pgbouncer host.
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort } from '../../helpers/embedded-pg.mjs';

export function pgbouncerBinary() {
  for (const p of ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer']) {
    if (spawnSync('test', ['-x', p]).status === 0) return p;
  }
  const which = spawnSync('sh', ['-c', 'command -v pgbouncer'], { encoding: 'utf8' });
  return which.status === 0 ? which.stdout.trim() : undefined;
}

const canConnect = (port) =>
  new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });

/** @param {{ binary: string, target: URL }} opts target: the direct database URL */
export async function startPgbouncer({ binary, target }) {
  // Its own directory under /tmp: PgBouncer refuses to run as root, so as root it switches to
  // `postgres`, which must reach its files (a mkdtemp work dir is 0700).
  const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-chaos-pgbouncer-'));
  chmodSync(dir, 0o755);
  const port = await freePort();
  const user = decodeURIComponent(target.username);
  const password = decodeURIComponent(target.password);
  const db = target.pathname.slice(1);
  const ini = path.join(dir, 'pgbouncer.ini');
  writeFileSync(path.join(dir, 'userlist.txt'), `"${user}" "${password}"\n`, { mode: 0o644 });
  writeFileSync(ini, [
    '[databases]',
    `${db} = host=${target.hostname} port=${target.port} dbname=${db} user=${user} password=${password}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    'auth_type = trust',
    `auth_file = ${path.join(dir, 'userlist.txt')}`,
    // Transaction pooling: the mode that breaks session state, the one leasejob claims to survive.
    'pool_mode = transaction',
    'max_client_conn = 200',
    'default_pool_size = 10',
    'server_reset_query =',
    'ignore_startup_parameters = extra_float_digits,options',
    // Servers die on a PostgreSQL restart: let PgBouncer retry them quickly.
    'server_login_retry = 1',
    '',
  ].join('\n'), { mode: 0o644 });
  const asRoot = process.getuid?.() === 0;
  const proc = spawn(binary, [...(asRoot ? ['-u', 'postgres'] : []), ini], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => {
    if (log.length < 20_000) log += d;
  });
  let exited = false;
  proc.once('exit', () => (exited = true));
  const started = Date.now();
  while (!(await canConnect(port))) {
    if (exited) throw new Error(`pgbouncer exited while starting: ${log.trim().split('\n').slice(-3).join(' | ')}`);
    if (Date.now() - started > 10_000) throw new Error('pgbouncer did not listen within 10 s');
    await new Promise((r) => setTimeout(r, 50));
  }
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return {
    url: url.toString(),
    stop: async () => {
      if (!exited) {
        await new Promise((resolve) => {
          proc.once('exit', resolve);
          proc.kill('SIGINT');
        });
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
