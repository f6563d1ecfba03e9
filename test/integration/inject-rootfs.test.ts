// Issue 21: the leasejob the chart injects needs no libc of the job's image. The directory
// scripts/inject-dir.mjs builds (the single file with glibc's loader and libraries, static tini
// and busybox, the start script) is mounted read-only at /leasejob, as the chart's image volume
// does, in three root filesystems made here, each run as a container: its own PID namespace
// (tini PID 1) and mount namespace, chrooted, `env -i`:
//   no libc   only /leasejob and a static program (musl-gcc -static): distroless/static, scratch
//   musl      Debian's musl loader at /lib/ld-musl-x86_64.so.1 and a program linked to it: Alpine
//   glibc     this machine's glibc at /lib64 and /lib/x86_64-linux-gnu and a program linked to it
// The job's program (test/fixtures/libc-probe.c, compiled here for each root) records its
// environment and its memory map: it runs on the root's own libc, with nothing of leasejob's
// loader or libraries, and no LD_* variable. Each root: exit codes, FENCE_TOKEN, a lost lease
// (75), SIGTERM to PID 1 (143).
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { logLines, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { singleFile } from '../helpers/single-file.js';
import { plainObject, podSpecOf } from '../deploy/deploy-files.js';
import { tempDir } from '../helpers/temp.js';
import { ROOT, fixture } from '../helpers/wait.js';
import { signalPid } from '../helpers/signal.mjs';

const built = singleFile();
const has = (cmd: string, args: string[] = ['--version']): boolean => spawnSync(cmd, args).status === 0;
const MUSL_LOADER = '/lib/ld-musl-x86_64.so.1';
const GLIBC_LOADER = '/lib64/ld-linux-x86-64.so.2';
const skip =
  built.unbuilt ??
  (os.arch() !== 'x64'
    ? 'the roots are made for x86-64'
    : process.getuid?.() !== 0 || spawnSync('unshare', ['-m', '-p', '-f', 'true']).status !== 0
      ? 'needs root and unshare (PID and mount namespaces) and chroot'
      : !has('patchelf') || !existsSync('/usr/bin/tini-static') || !existsSync('/bin/busybox')
        ? 'needs patchelf, tini and busybox-static (.ci/run installs them)'
        : !has('musl-gcc', ['-v']) || !existsSync(MUSL_LOADER) || !has('gcc')
          ? 'needs musl, musl-tools (musl-gcc) and gcc (.ci/run installs them)'
          : undefined);
if (skip) console.info(`injected-leasejob root filesystem tests skipped: ${skip}`);

const tmp = tempDir('leasejob-rootfs-');
const INJECT = path.join(tmp, 'inject');
const SOURCE = fixture('libc-probe.c');

type Kind = 'no libc' | 'musl' | 'glibc';
interface Root {
  dir: string;
  /** A line of the probe's memory map that shows which libc ran it (none: static). */
  libc: RegExp | undefined;
}

/** A root filesystem: /proc, /dev, /tmp, /leasejob to mount on, and the probe built for it. */
function makeRoot(kind: Kind): Root {
  const dir = path.join(tmp, kind.replace(' ', '-'));
  for (const d of ['proc', 'dev', 'tmp', 'leasejob', 'bin']) mkdirSync(path.join(dir, d), { recursive: true });
  const probe = path.join(dir, 'bin', 'probe');
  if (kind === 'no libc') {
    execFileSync('musl-gcc', ['-static', '-O2', '-o', probe, SOURCE]);
    return { dir, libc: undefined };
  }
  if (kind === 'musl') {
    mkdirSync(path.join(dir, 'lib'));
    copyFileSync(realpathSync(MUSL_LOADER), path.join(dir, MUSL_LOADER));
    execFileSync('musl-gcc', ['-O2', '-o', probe, SOURCE]);
    return { dir, libc: /\s\/lib\/ld-musl-x86_64\.so\.1$/m };
  }
  mkdirSync(path.join(dir, 'lib', 'x86_64-linux-gnu'), { recursive: true });
  mkdirSync(path.join(dir, 'lib64'));
  copyFileSync(realpathSync(GLIBC_LOADER), path.join(dir, 'lib', 'x86_64-linux-gnu', 'ld-linux-x86-64.so.2'));
  symlinkSync('/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2', path.join(dir, GLIBC_LOADER));
  copyFileSync('/lib/x86_64-linux-gnu/libc.so.6', path.join(dir, 'lib', 'x86_64-linux-gnu', 'libc.so.6'));
  execFileSync('gcc', ['-O2', '-o', probe, SOURCE]);
  return { dir, libc: /\s\/lib\/x86_64-linux-gnu\/libc\.so\.6$/m };
}

/**
 * `/leasejob/busybox sh /leasejob/start <args>` as a container's command in `root`: new PID
 * and mount namespaces, /proc and /dev, the directory mounted read-only at /leasejob, chroot,
 * an environment of PATH and HOME only (and `env`, NAME=value each). `from`: the directory
 * mounted (the image's, as an image volume shows it; or a copy, as the init container makes it).
 */
function container(root: Root, args: string[], env: string[] = [], from = INJECT, at = '/leasejob') {
  mkdirSync(path.join(root.dir, at), { recursive: true });
  const setup = [
    'mount --make-rprivate /',
    'mount -t proc proc "$1/proc"',
    'mount --bind /dev "$1/dev"',
    `mount --bind "$2" "$1${at}"`,
    `mount -o remount,bind,ro "$1${at}"`,
    'root=$1; shift 2',
    `exec chroot "$root" ${at}/busybox env -i PATH=/bin HOME=/tmp "$@"`,
  ].join(' && ');
  return execa(
    'unshare',
    ['-m', '-p', '-f', 'sh', '-c', setup, 'sh', root.dir, from, ...env, `${at}/busybox`, 'sh', `${at}/start`, ...args],
    { env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' }, extendEnv: false, reject: false, all: true, timeout: 60_000 },
  );
}

/** Host pids of processes whose argv passes `match`. */
function pidsWhere(match: (argv: string[]) => boolean): number[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        return match(readFileSync(`/proc/${d}/cmdline`, 'latin1').split('\0').slice(0, -1));
      } catch {
        return false; // gone meanwhile
      }
    })
    .map(Number);
}
const injected = (program: string, job: string): number | undefined =>
  pidsWhere((a) => a[0] === `/leasejob/${program}` && a.includes(job))[0];

let db: TestDb;
const roots = new Map<Kind, Root>();

describe.skipIf(skip !== undefined)('the injected leasejob in an image of any libc', () => {
  beforeAll(async () => {
    const r = spawnSync(
      process.execPath,
      [path.join(ROOT, 'scripts', 'inject-dir.mjs'), '--file', built.file!, '--out', INJECT],
      {
        encoding: 'utf8',
      },
    );
    expect(r.status, r.stderr).toBe(0);
    for (const kind of ['no libc', 'musl', 'glibc'] as const) roots.set(kind, makeRoot(kind));
    db = await testDb();
  });
  afterAll(async () => {
    await db?.close();
  });

  const pg = (): string[] => ['--database-url', db.url, '--schema', db.schema];
  /** A directory for the probe's records, as the root sees it and as this test does. */
  const records = (root: Root, job: string): [string, string] => {
    mkdirSync(path.join(root.dir, 'tmp', job));
    return [`/tmp/${job}`, path.join(root.dir, 'tmp', job)];
  };

  it('patchelf kept the single file whole: its SEA blob runs and V8 takes its code cache', async () => {
    const r = await container(roots.get('no libc')!, ['--version'], ['LEASEJOB_SINGLE_FILE_CACHE=report']);
    expect(r.exitCode, r.all).toBe(0);
    expect(r.stderr).toBe('code cache: used');
    expect(r.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it("copy mode: the chart's init container command, run as the chart's uid, makes a copy that runs the same", async () => {
    const init = podSpecOf(plainObject('CronJob', 'leasejob-example')).initContainers[0] as { command: string[] };
    expect(init.command.slice(0, 2)).toEqual(['/leasejob/busybox', 'cp']);
    // The init container runs in the leasejob image, which has /leasejob: here a root holding only it.
    const image = path.join(tmp, 'image');
    const emptyDir = path.join(tmp, 'empty-dir');
    for (const d of ['leasejob', 'inject']) mkdirSync(path.join(image, d), { recursive: true });
    mkdirSync(emptyDir, { mode: 0o777 });
    execFileSync('chmod', ['0777', emptyDir]); // an emptyDir is world-writable
    const copy = spawnSync('unshare', ['-m', 'sh', '-c',
      'mount --make-rprivate / && mount --bind -o ro "$1" "$2/leasejob" && mount --bind "$3" "$2/inject" && shift 3 && exec chroot --userspec=10001:10001 "$@"',
      'sh', INJECT, image, emptyDir, image, ...init.command], { encoding: 'utf8' }); // prettier-ignore
    expect(copy.status, copy.stderr).toBe(0);
    expect(readdirSync(emptyDir).sort()).toEqual(readdirSync(INJECT).sort());
    const root = roots.get('no libc')!;
    const name = 'rootfs-copied';
    const [inRoot, here] = records(root, name);
    const r = await container(
      root,
      ['run', ...pg(), '--name', name, '--window', 'w', '--', '/bin/probe', inRoot, 'exit', '7'],
      [],
      emptyDir,
    );
    expect(r.exitCode, r.all).toBe(7);
    expect(readFileSync(path.join(here, 'token'), 'utf8')).toMatch(/^\d+$/);
  });

  it('elsewhere than /leasejob, leasejob starts through its loader, and so does the guard of its child', async () => {
    const root = roots.get('no libc')!;
    const name = 'rootfs-elsewhere';
    const [inRoot, here] = records(root, name);
    const r = await container(
      root,
      ['run', ...pg(), '--name', name, '--window', 'w', '--', '/bin/probe', inRoot, 'exit', '5'],
      [],
      INJECT,
      '/opt/leasejob',
    );
    expect(r.exitCode, r.all).toBe(5);
    expect(readFileSync(path.join(here, 'token'), 'utf8')).toMatch(/^\d+$/);
  });

  describe.each(['no libc', 'musl', 'glibc'] as const)('%s', (kind) => {
    const job = (what: string): string => `rootfs-${kind.replace(' ', '-')}-${what}`;

    it('the exit code passes through; the program gets FENCE_TOKEN and runs on its own libc, with no LD_* of leasejob', async () => {
      const root = roots.get(kind)!;
      // Nothing of glibc in the root outside /leasejob, unless it is the glibc root.
      const glibcHere = spawnSync('find', [root.dir, '-name', 'ld-linux*', '-not', '-path', '*/leasejob/*']).stdout;
      expect(String(glibcHere).trim() !== '', kind).toBe(kind === 'glibc');
      const name = job('exit');
      const [inRoot, here] = records(root, name);
      const r = await container(root, [
        'run',
        ...pg(),
        '--name',
        name,
        '--window',
        'w',
        '--',
        '/bin/probe',
        inRoot,
        'exit',
        '3',
      ]);
      expect(r.exitCode, r.all).toBe(3);
      const [w] = await db.rows<{ exit_code: number; generation: string }>(
        `SELECT exit_code, generation::text FROM ${db.schema}.windows WHERE job = $1`,
        [name],
      );
      expect(w?.exit_code).toBe(3);
      expect(readFileSync(path.join(here, 'token'), 'utf8')).toBe(w?.generation);
      const env = readFileSync(path.join(here, 'env'), 'utf8');
      expect(env).toMatch(/^FENCE_TOKEN=\d+$/m);
      expect(env).not.toMatch(/^LD_/m);
      expect(env).not.toContain('/leasejob');
      const maps = readFileSync(path.join(here, 'maps'), 'utf8');
      expect(maps).not.toContain('/leasejob');
      if (root.libc) expect(maps).toMatch(root.libc);
      else expect(maps).not.toMatch(/\.so/);
      // And exit 0 is 0.
      const ok = await container(root, [
        'run',
        ...pg(),
        '--name',
        name,
        '--window',
        'w2',
        '--',
        '/bin/probe',
        inRoot,
        'exit',
        '0',
      ]);
      expect(ok.exitCode, ok.all).toBe(0);
    });

    it('a lost lease stops the program (SIGTERM) and exits 75; leasejob itself runs on /leasejob/lib', async () => {
      const root = roots.get(kind)!;
      const name = job('lost');
      const [inRoot, here] = records(root, name);
      const run = container(root, ['run', ...pg(), '--name', name, '--window', 'w', '--ttl', '6s', '--kill-grace', '2s',
        '--', '/bin/probe', inRoot, 'wait']); // prettier-ignore
      await waitFor('the program ready', () => existsSync(path.join(here, 'ready')));
      // leasejob's own libc is the one it brought, whatever the root has (its map, read from
      // out here, names the files by this side's path: <root>/leasejob).
      const leasejob = injected('leasejob', name);
      expect(leasejob).toBeDefined();
      const mapped = readFileSync(`/proc/${leasejob}/maps`, 'utf8')
        .split('\n')
        .map((l) => l.split(/\s+/)[5])
        .filter((f): f is string => f?.startsWith('/') === true);
      expect(new Set(mapped.filter((f) => f.includes('.so')))).toEqual(
        new Set(readdirSync(path.join(INJECT, 'lib')).map((l) => `${root.dir}/leasejob/lib/${l}`)),
      );
      await db.rows(
        `UPDATE ${db.schema}.leases SET owner = 'intruder:1:x', generation = generation + 1, expires_at = now() + interval '1 hour' WHERE name = $1`,
        [name],
      );
      const r = await run;
      expect(r.exitCode, r.all).toBe(75);
      expect(readFileSync(path.join(here, 'term'), 'utf8')).toBe('TERM\n');
      expect(logLines(r.stderr).some((l) => l.msg === 'lease lost')).toBe(true);
    });

    it('SIGTERM to PID 1 (tini): the program is stopped, exit 143 in the process and the ledger', async () => {
      const root = roots.get(kind)!;
      const name = job('term');
      const [inRoot, here] = records(root, name);
      const run = container(root, [
        'run',
        ...pg(),
        '--name',
        name,
        '--window',
        'w',
        '--kill-grace',
        '5s',
        '--',
        '/bin/probe',
        inRoot,
        'wait',
      ]);
      await waitFor('the program ready', () => existsSync(path.join(here, 'ready')));
      // As the kubelet does: to the container's PID 1.
      signalPid(injected('tini', name)!, 'SIGTERM');
      const r = await run;
      expect(r.exitCode, r.all).toBe(143);
      expect(readFileSync(path.join(here, 'term'), 'utf8')).toBe('TERM\n');
      const [w] = await db.rows<{ exit_code: number }>(`SELECT exit_code FROM ${db.schema}.windows WHERE job = $1`, [
        name,
      ]);
      expect(w?.exit_code).toBe(143);
    });
  });
});
