#!/usr/bin/env node
// Opt-in, not in `npm test` (a minute or two, and it downloads Debian's base packages): the
// single file in a minimal Debian root filesystem that has never seen Node, as a bare host or a
// job's image would be. `debootstrap --variant=minbase bookworm` makes the root once (kept in
// LEASEJOB_MINBASE_DIR, default /var/tmp/leasejob-minbase; python3-minimal added with the
// root's own apt-get), the file is copied to its /usr/local/bin/leasejob, and every command
// runs through `chroot <root> env -i PATH=/usr/bin:/bin`, against a throwaway PostgreSQL on
// loopback and the embedded store, with sh and python3 children: exit codes, FENCE_TOKEN, a
// lost lease, SIGTERM.
//
//   npm run single-file:minbase      (as root)
//
// Exit 0 when every check held, 1 otherwise, 2 when it cannot run here (not root, no
// debootstrap and no apt-get to install it), saying why.
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import pg from 'pg';
import { startEmbeddedPostgres } from '../helpers/embedded-pg.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const DIR = process.env.LEASEJOB_MINBASE_DIR || '/var/tmp/leasejob-minbase';
const FS = path.join(DIR, 'root');
const say = (m) => process.stdout.write(`[minbase] ${m}\n`);
const give = (why) => {
  say(`cannot run: ${why}`);
  process.exit(2);
};

if (process.getuid?.() !== 0) give('needs root (debootstrap, chroot)');
if (spawnSync('sh', ['-c', 'command -v debootstrap']).status !== 0) {
  say('installing debootstrap');
  if (spawnSync('apt-get', ['install', '-y', '-qq', 'debootstrap'], { stdio: 'inherit' }).status !== 0)
    give('no debootstrap, and apt-get could not install it');
}
if (!existsSync(path.join(FS, 'usr', 'bin', 'python3'))) {
  rmSync(FS, { recursive: true, force: true });
  mkdirSync(DIR, { recursive: true });
  say(`debootstrap --variant=minbase bookworm ${FS}`);
  execFileSync('debootstrap', ['--variant=minbase', 'bookworm', FS], { stdio: ['ignore', 'ignore', 'inherit'] });
  execFileSync('chroot', [FS, 'apt-get', 'install', '-y', '-qq', '--no-install-recommends', 'python3-minimal'], {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', DEBIAN_FRONTEND: 'noninteractive' },
  });
}
say('npm run single-file');
execFileSync(process.execPath, [path.join(ROOT, 'scripts', 'single-file.mjs')], { cwd: ROOT, stdio: 'ignore' });
copyFileSync(path.join(ROOT, 'dist', 'single-file', 'leasejob-linux-x64'), path.join(FS, 'usr/local/bin/leasejob'));
execFileSync('chmod', ['0755', path.join(FS, 'usr/local/bin/leasejob')]);
const work = '/tmp/leasejob-minbase';
rmSync(path.join(FS, work), { recursive: true, force: true });
mkdirSync(path.join(FS, work));
const inRoot = (file) => path.join(FS, work, file);
const LJ = '/usr/local/bin/leasejob';

/** A command in the root, as a host without Node runs it. */
const inside = (argv) =>
  execa('chroot', [FS, 'env', '-i', 'PATH=/usr/bin:/bin', `HOME=${work}`, ...argv], {
    env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
    extendEnv: false,
    reject: false,
    all: true,
    cwd: '/',
  });
const waitFor = async (probe) => {
  for (let i = 0; i < 600 && !probe(); i++) await new Promise((r) => setTimeout(r, 50));
  return probe();
};

const server = await startEmbeddedPostgres();
const db = new pg.Pool({ connectionString: server.url, max: 2 });
db.on('error', () => {}); // the server's shutdown, at the end
const conn = ['--database-url', server.url, '--schema', 'minbase'];
const results = [];
const check = (name, ok, detail = '') => {
  results.push(ok);
  say(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : `: ${detail}`}`);
};
try {
  const node = await inside(['sh', '-c', 'command -v node || echo none']);
  check('no node in the root filesystem', node.stdout.trim() === 'none', node.all);
  const version = await inside([LJ, '--version']);
  check('leasejob --version', version.exitCode === 0, version.all);
  const m = await inside([LJ, 'migrate', ...conn]);
  check('migrate from the SQL inside the file', m.exitCode === 0, m.all);
  const sh = await inside([LJ, 'run', ...conn, '--name', 'mb-sh', '--window', 'w', '--', 'sh', '-c',
    `echo "$FENCE_TOKEN" > ${work}/sh.token`]); // prettier-ignore
  check(
    'sh child, FENCE_TOKEN',
    sh.exitCode === 0 && /^\d+$/.test(readFileSync(inRoot('sh.token'), 'utf8').trim()),
    sh.all,
  );
  const py = await inside([LJ, 'run', ...conn, '--name', 'mb-py', '--window', 'w', '--', 'python3', '-c',
    'import sys; sys.exit(3)']); // prettier-ignore
  check("python3 child's exit code passed through", py.exitCode === 3, py.all);
  const emb = await inside([LJ, 'run', '--state-file', `${work}/state.db`, '--name', 'mb-e', '--window', 'w',
    '--', 'sh', '-c', `echo "$FENCE_TOKEN" >> ${work}/e.runs`]); // prettier-ignore
  const emb2 = await inside([LJ, 'run', '--state-file', `${work}/state.db`, '--name', 'mb-e', '--window', 'w',
    '--', 'sh', '-c', `echo "$FENCE_TOKEN" >> ${work}/e.runs`]); // prettier-ignore
  check('embedded store (node:sqlite): once per window', emb.exitCode === 0 && emb2.exitCode === 0 &&
    readFileSync(inRoot('e.runs'), 'utf8') === '1\n', emb.all + emb2.all); // prettier-ignore
  const lost = inside([LJ, 'run', ...conn, '--name', 'mb-lost', '--window', 'w', '--ttl', '6s', '--', 'sh', '-c',
    `trap 'exit 143' TERM; touch ${work}/lost.ready; while :; do sleep 0.1; done`]); // prettier-ignore
  await waitFor(() => existsSync(inRoot('lost.ready')));
  await db.query(
    "UPDATE minbase.leases SET owner = 'intruder:1:x', generation = generation + 1, expires_at = now() + interval '1 hour' WHERE name = 'mb-lost'",
  );
  const l = await lost;
  check('a lost lease: child stopped, exit 75', l.exitCode === 75, l.all);
  const term = inside([LJ, 'run', ...conn, '--name', 'mb-term', '--window', 'w', '--', 'python3', '-c',
    `import signal, sys, time, pathlib\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\npathlib.Path("${work}/term.ready").touch()\nwhile True: time.sleep(0.1)`]); // prettier-ignore
  await waitFor(() => existsSync(inRoot('term.ready')));
  term.kill('SIGTERM'); // chroot and env exec: this pid is leasejob's
  const t = await term;
  check('SIGTERM: the python3 child is stopped, exit 143', t.exitCode === 143, t.all);
} finally {
  await db.end();
  await server.stop();
}
const failed = results.filter((ok) => !ok).length;
process.stdout.write(`${results.length - failed} passed, ${failed} failed\n`);
process.exit(failed === 0 ? 0 : 1);
