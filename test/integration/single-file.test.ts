// Issue 16: leasejob as one executable that needs nothing but glibc. Built here with the
// npm script's own builder (the pinned Node from the npm registry, cached after the first
// build), then run as a host without Node would: from an empty directory, `env -i
// PATH=/usr/bin:/bin`, and, where this runs as root, in a mount namespace where the machine's
// /usr/bin/node is not executable, so nothing can quietly fall back to it. Children are `sh`
// and `python3`; the stores are the test PostgreSQL and the embedded one (node:sqlite inside
// the file). The test is skipped, saying why, only when the file cannot be built.
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { logLines, runCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir, tempDirs } from '../helpers/temp.js';
import { ROOT } from '../helpers/wait.js';
import { signalPid } from '../helpers/signal.mjs';

const out = tempDir('leasejob-single-file-');
const FILE = path.join(out, 'leasejob');

function build(): string | undefined {
  const r = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'single-file.mjs'), '--out', FILE], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 300_000,
  });
  if (r.status === 0 && existsSync(FILE)) return undefined;
  return `the single file could not be built (npm run single-file): ${(r.stderr || r.error?.message || '').trim().split('\n').at(-1)}`;
}
const unbuilt = build();
if (unbuilt) console.info(`single-file tests skipped: ${unbuilt}`);

/** Root can hide the machine's Node in a private mount namespace; anyone else runs without it on PATH only where it is absent. */
const HIDE_NODE =
  process.getuid?.() === 0 && existsSync('/usr/bin/node') && spawnSync('unshare', ['-m', 'true']).status === 0;

/** The single file run as on a host without Node: empty directory, `env -i PATH=/usr/bin:/bin`. */
function startFile(args: string[], cwd: string, env: Record<string, string> = {}) {
  const vars = Object.entries({ PATH: '/usr/bin:/bin', HOME: cwd, ...env }).map(([k, v]) => `${k}=${v}`);
  const [file, argv] = HIDE_NODE
    ? [
        'unshare',
        ['-m', 'sh', '-c', 'mount --bind /dev/null /usr/bin/node && exec env -i "$@"', 'sh', ...vars, FILE, ...args],
      ]
    : ['env', ['-i', ...vars, FILE, ...args]];
  return execa(file, argv, { cwd, env: {}, extendEnv: false, reject: false, all: true, timeout: 60_000 });
}

const dirs = tempDirs('leasejob-single-cwd-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db?.close();
});

const pgArgs = (): string[] => ['--database-url', db.url, '--schema', db.schema];

describe.skipIf(unbuilt !== undefined)('the single executable, on a host without Node', () => {
  it('is one file that needs only glibc: no node, no node_modules beside it', () => {
    // Its ELF interpreter (PT_INTERP, in the first page) is glibc's loader: nothing else is asked of the host.
    const head = Buffer.alloc(4096);
    const fd = openSync(FILE, 'r');
    readSync(fd, head, 0, head.length, 0);
    closeSync(fd);
    expect(head.subarray(0, 4).toString('latin1')).toBe('\x7fELF');
    expect(head.toString('latin1')).toMatch(/\/lib64\/ld-linux-x86-64\.so\.2|\/lib\/ld-linux-aarch64\.so\.1/);
    const version = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version as string;
    expect(execFileSync(FILE, ['--version'], { env: {}, cwd: dirs(), encoding: 'utf8' }).trim()).toBe(version);
  });

  it('is built reproducibly, with a code cache that V8 takes', () => {
    const again = path.join(out, 'again');
    const r = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'single-file.mjs'), '--out', again], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    expect(r.status, r.stderr).toBe(0);
    // Quiet unless something is wrong: the file and its sha256, no postject or Node chatter.
    // (A machine without musl-gcc builds no native guard: the builder says so, and that alone.)
    expect(r.stderr).toMatch(/^(note: \S+ was not built; the single file will run the Node guard\n)?$/);
    // ... and the native guard placed beside it, where one was built (a two-file release).
    expect(r.stdout).toMatch(/^\S+\nsha256 [0-9a-f]{64}\n(\S+ \(its native guard, shipped beside it\)\n)?$/);
    expect(readFileSync(again).equals(readFileSync(FILE))).toBe(true);
    const v = spawnSync(FILE, ['--version'], { env: { LEASEJOB_SINGLE_FILE_CACHE: 'report' }, encoding: 'utf8' });
    expect(v.stderr).toBe('code cache: used\n');
  });

  it('PostgreSQL: migrates a new schema from the SQL inside it, then runs sh and python3 children with FENCE_TOKEN', async () => {
    const cwd = dirs();
    const schema = `${db.schema}_sf`;
    const conn = ['--database-url', db.url, '--schema', schema];
    const m = await startFile(['migrate', ...conn], cwd);
    expect(m.exitCode, m.all).toBe(0);
    const sh = await startFile(
      [
        'run',
        ...conn,
        '--name',
        'sf-sh',
        '--window',
        'w1',
        '--',
        'sh',
        '-c',
        'command -v node || echo "$FENCE_TOKEN" > sh.out',
      ],
      cwd,
    );
    expect(sh.exitCode, sh.all).toBe(0);
    if (HIDE_NODE) expect(readFileSync(path.join(cwd, 'sh.out'), 'utf8').trim()).toMatch(/^\d+$/);
    const py = await startFile(
      ['run', ...conn, '--name', 'sf-py', '--window', 'w1', '--', 'python3', '-c',
        'import os, sys; open("py.out", "w").write(os.environ["FENCE_TOKEN"]); sys.exit(3)'],
      cwd,
    ); // prettier-ignore
    expect(py.exitCode, py.all).toBe(3);
    const [w] = await db.rows<{ exit_code: number; generation: string }>(
      `SELECT exit_code, generation::text FROM ${schema}.windows WHERE job = 'sf-py'`,
    );
    expect(w?.exit_code).toBe(3);
    expect(readFileSync(path.join(cwd, 'py.out'), 'utf8')).toBe(w?.generation);
    // The window is in the ledger: the same occurrence does not run twice.
    const again = await startFile(
      ['run', ...conn, '--name', 'sf-sh', '--window', 'w1', '--', 'sh', '-c', 'touch twice'],
      cwd,
    );
    expect(again.exitCode, again.all).toBe(0);
    expect(existsSync(path.join(cwd, 'twice'))).toBe(false);
  });

  it('traces: the child gets TRACEPARENT; asked to export to a closed port, the file says so at once and the exit code stands', async () => {
    const cwd = dirs();
    const r = await startFile(
      ['run', '--state-file', 'state.db', '--name', 'sf-trace', '--window', 'w1', '--', 'sh', '-c',
        'echo "$TRACEPARENT" > tp.out; exit 4'],
      cwd,
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' },
    ); // prettier-ignore
    expect(r.exitCode, r.all).toBe(4);
    expect(readFileSync(path.join(cwd, 'tp.out'), 'utf8').trim()).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    // It exports as the npm build does (test/integration/single-file-traces.test.ts): here nobody listens.
    const failed = logLines(r.stderr).find((l) => l.msg === 'trace export failed; the run is unaffected');
    expect(String(failed?.err)).toMatch(/^no collector there \(ECONNREFUSED/);
  });

  it('PostgreSQL: a lost lease stops the child (SIGTERM) and exits 75', async () => {
    const cwd = dirs();
    const run = startFile(
      ['run', ...pgArgs(), '--name', 'sf-lost', '--window', 'w', '--ttl', '6s', '--kill-grace', '2s', '--', 'sh', '-c',
        'trap "echo TERM > term; exit 143" TERM; touch ready; while :; do sleep 0.1; done'],
      cwd,
    ); // prettier-ignore
    await waitFor('child ready', () => existsSync(path.join(cwd, 'ready')));
    await db.rows(
      `UPDATE ${db.schema}.leases SET owner = 'intruder:1:x', generation = generation + 1, expires_at = now() + interval '1 hour' WHERE name = 'sf-lost'`,
    );
    const r = await run;
    expect(r.exitCode, r.all).toBe(75);
    expect(readFileSync(path.join(cwd, 'term'), 'utf8').trim()).toBe('TERM');
    expect(logLines(r.stderr).some((l) => l.msg === 'lease lost')).toBe(true);
  });

  it('SIGTERM to leasejob: the python3 child is told, and the exit is 143 in the ledger and the process', async () => {
    const cwd = dirs();
    const run = startFile(
      ['run', ...pgArgs(), '--name', 'sf-term', '--window', 'w', '--kill-grace', '5s', '--', 'python3', '-c',
        'import signal, sys, time, pathlib\n' +
        'signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path("term").write_text("TERM"), sys.exit(0)))\n' +
        'pathlib.Path("ready").touch()\nwhile True: time.sleep(0.1)'],
      cwd,
    ); // prettier-ignore
    await waitFor('child ready', () => existsSync(path.join(cwd, 'ready')));
    run.kill('SIGTERM');
    const r = await run;
    expect(r.exitCode, r.all).toBe(143);
    expect(readFileSync(path.join(cwd, 'term'), 'utf8')).toBe('TERM');
    const [w] = await db.rows<{ exit_code: number }>(
      `SELECT exit_code FROM ${db.schema}.windows WHERE job = 'sf-term'`,
    );
    expect(w?.exit_code).toBe(143);
  });

  it('the embedded store on node:sqlite: runs once per window, and its state file is the npm package’s too', async () => {
    const cwd = dirs();
    const state = path.join(cwd, 'leasejob.db');
    const args = ['--state-file', state, '--name', 'sf-embedded', '--window', 'w1'];
    const first = await startFile(['run', ...args, '--', 'sh', '-c', 'echo "$FENCE_TOKEN" >> runs'], cwd);
    expect(first.exitCode, first.all).toBe(0);
    const second = await startFile(['run', ...args, '--', 'sh', '-c', 'echo "$FENCE_TOKEN" >> runs'], cwd);
    expect(second.exitCode, second.all).toBe(0);
    // One run, one token: the embedded store's tokens follow the clock in ms (docs/fencing.md).
    expect(readFileSync(path.join(cwd, 'runs'), 'utf8')).toMatch(/^[1-9]\d*\n$/);
    const failed = await startFile(
      [
        'run',
        '--state-file',
        state,
        '--name',
        'sf-embedded',
        '--window',
        'w2',
        '--',
        'python3',
        '-c',
        'raise SystemExit(4)',
      ],
      cwd,
    );
    expect(failed.exitCode, failed.all).toBe(4);
    // The npm package (better-sqlite3 on this Node) reads what node:sqlite wrote, and back.
    const status = await runCli(['status', '--state-file', state, '--json']);
    expect(status.exitCode, status.all).toBe(0);
    expect(status.stdout).toContain('sf-embedded');
    const npmRun = await runCli([
      'run',
      '--state-file',
      state,
      '--name',
      'sf-embedded',
      '--window',
      'w3',
      '--',
      'true',
    ]);
    expect(npmRun.exitCode, npmRun.all).toBe(0);
    const history = await startFile(['history', '--state-file', state, '--name', 'sf-embedded', '--json'], cwd);
    expect(history.exitCode, history.all).toBe(0);
    for (const w of ['w1', 'w2', 'w3']) expect(history.stdout).toContain(`"${w}"`);
  });

  // A two-file release: the native guard beside the file (no writable executable directory
  // needed); the file copied alone runs as its own (Node) guard.
  it('runs its child under the native guard beside it, and under itself when copied alone', async () => {
    const guardFile = path.join(out, `leasejob-guard-linux-${process.arch}`);
    const nativeBuilt = existsSync(path.join(ROOT, 'dist', 'guard', `linux-${process.arch}`, 'leasejob-guard'));
    expect(existsSync(guardFile)).toBe(nativeBuilt);
    const guardOf = async (file: string, job: string): Promise<unknown> => {
      const cwd = dirs();
      const r = await execa(
        'env',
        [
          '-i',
          'PATH=/usr/bin:/bin',
          `HOME=${cwd}`,
          file,
          'run',
          '--log-level',
          'debug',
          '--state-file',
          path.join(cwd, 's.db'),
          '--name',
          job,
          '--',
          'true',
        ],
        { cwd, reject: false, all: true, timeout: 60_000 },
      );
      expect(r.exitCode, r.all).toBe(0);
      return logLines(r.stderr).find((l) => l.msg === 'child guarded')?.guard;
    };
    if (nativeBuilt) expect(await guardOf(FILE, 'sf-guard-native')).toBe('native');
    const alone = path.join(dirs(), 'leasejob');
    execFileSync('cp', [FILE, alone]);
    expect(await guardOf(alone, 'sf-guard-alone')).toBe('node');
  });

  it('a bad flag: exit 64 and a message, nothing written', async () => {
    const cwd = dirs();
    const r = await startFile(['run', '--name', 'x', '--window', 'w', '--ttl', 'soon', '--', 'true'], cwd);
    expect(r.exitCode, r.all).toBe(64);
    expect(r.stderr).toMatch(/--ttl/);
    writeFileSync(path.join(cwd, '.keep'), '');
    expect(execFileSync('ls', ['-A', cwd], { encoding: 'utf8' }).trim()).toBe('.keep');
  });
});

// The chart's injection (deploy/inject/start, helm/leasejob): the single file, Debian's static
// tini and static busybox and the start script in a directory, run by a job's container with
// none of Node, setpriv or tini of its own. A container is made here with unshare: its own PID
// namespace (tini as PID 1, /proc its own) and mount namespace, where the machine's node and
// setpriv are not executable.
const TINI = '/usr/bin/tini-static';
const BUSYBOX = '/bin/busybox';
const noInject = unbuilt
  ? unbuilt
  : !HIDE_NODE || spawnSync('unshare', ['-p', '-f', '--mount-proc', 'true']).status !== 0
    ? 'needs root and unshare (PID and mount namespaces)'
    : !existsSync(TINI) || !existsSync(BUSYBOX) || spawnSync('patchelf', ['--version']).status !== 0
      ? `needs Debian's tini (${TINI}), busybox-static (${BUSYBOX}) and patchelf; .ci/run installs them`
      : undefined;
if (noInject) console.info(`injected-start tests skipped: ${noInject}`);

/**
 * The chart's directory (scripts/inject-dir.mjs), here outside /leasejob: `start` runs leasejob
 * through its own glibc loader (test/integration/inject-rootfs.test.ts runs it at /leasejob).
 */
function injectDir(root: string): string {
  const dir = path.join(root, 'leasejob');
  execFileSync(process.execPath, [path.join(ROOT, 'scripts', 'inject-dir.mjs'), '--file', FILE, '--out', dir]);
  return dir;
}

/** `<dir>/busybox sh <dir>/start <args>` as a container's command: PID 1 in new PID and mount namespaces. */
function startContainer(dir: string, args: string[], cwd: string) {
  const hide = 'for f in /usr/bin/node /usr/bin/setpriv; do mount --bind /dev/null "$f"; done';
  return execa(
    'unshare',
    ['-p', '-f', '--mount-proc', 'sh', '-c', `${hide} && exec env -i PATH=/usr/bin:/bin HOME="$PWD" "$@"`, 'sh',
      path.join(dir, 'busybox'), 'sh', path.join(dir, 'start'), ...args],
    { cwd, env: {}, extendEnv: false, reject: false, all: true, timeout: 60_000 },
  ); // prettier-ignore
}

/** Host pids of the processes whose argv passes `match`. */
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
const pidsOf = (argv: string[]): number[] => pidsWhere((a) => a.join(' ') === argv.join(' '));
/** The host pid of the injected `program` (leasejob, tini) running job `job`. */
/** Outside /leasejob, leasejob runs through its loader: that is its argv[0] in /proc. */
const injected = (dir: string, program: string, job: string): number | undefined => {
  const argv0 = program === 'leasejob' ? path.join(dir, 'lib', 'ld-linux-x86-64.so.2') : path.join(dir, program);
  return pidsWhere((a) => a[0] === argv0 && a.includes(job))[0];
};

describe.skipIf(noInject !== undefined)('injected into a container without Node, setpriv or tini', () => {
  it('leasejob SIGKILLed: tini (PID 1) exits with it and the kernel takes the child; orphans are reaped meanwhile', async () => {
    const cwd = dirs();
    const dir = injectDir(cwd);
    // The orphan: a script that runs until told to stop, its parent (a subshell) gone at once.
    const orphanScript = path.join(cwd, 'orphan.sh');
    writeFileSync(orphanScript, `while [ ! -e ${path.join(cwd, 'release')} ]; do sleep 0.05; done\n`);
    const orphan = ['sh', orphanScript]; // a unique argv, to find its host pid
    const child = ['sleep', `1000.${process.pid}2`];
    const run = startContainer(
      dir,
      ['run', ...pgArgs(), '--name', 'inj-kill', '--window', 'w', '--', 'sh', '-c',
        `(${orphan.join(' ')} &); ${child.join(' ')} & touch ready; wait`],
      cwd,
    ); // prettier-ignore
    await waitFor('child ready', () => existsSync(path.join(cwd, 'ready')));
    // Reparented to PID 1, tini, which reaps it when it exits.
    const [orphanPid] = await waitFor('the orphan started', () => pidsOf(orphan).length > 0 && pidsOf(orphan));
    writeFileSync(path.join(cwd, 'release'), '');
    await waitFor('the orphan reaped (not left a zombie)', () => !existsSync(`/proc/${orphanPid}`));
    const [childPid] = await waitFor('the child started', () => pidsOf(child).length > 0 && pidsOf(child));
    const leasejob = injected(dir, 'leasejob', 'inj-kill');
    expect(leasejob).toBeDefined();
    // No setpriv here: leasejob says which mechanism holds the child instead of warning.
    signalPid(leasejob!, 'SIGKILL');
    const r = await run;
    expect(r.exitCode, r.all).toBe(137);
    expect(r.stderr).not.toContain('no parent-death signal');
    await waitFor('the child gone with the container', () => !existsSync(`/proc/${childPid}`));
  });

  it('SIGTERM to the container: tini forwards it, the child is stopped, exit 143; sh and python3 children get FENCE_TOKEN', async () => {
    const cwd = dirs();
    const dir = injectDir(cwd);
    const ok = await startContainer(
      dir,
      ['run', ...pgArgs(), '--name', 'inj-py', '--window', 'w', '--', 'python3', '-c',
        'import os; open("token", "w").write(os.environ["FENCE_TOKEN"])'],
      cwd,
    ); // prettier-ignore
    expect(ok.exitCode, ok.all).toBe(0);
    expect(readFileSync(path.join(cwd, 'token'), 'utf8')).toMatch(/^\d+$/);
    const run = startContainer(
      dir,
      ['run', ...pgArgs(), '--name', 'inj-term', '--window', 'w', '--', 'sh', '-c',
        'trap "echo TERM > term; exit 0" TERM; touch ready; while :; do sleep 0.1; done'],
      cwd,
    ); // prettier-ignore
    await waitFor('child ready', () => existsSync(path.join(cwd, 'ready')));
    // As the kubelet does: to the container's PID 1 (unshare itself forwards nothing).
    signalPid(injected(dir, 'tini', 'inj-term')!, 'SIGTERM');
    const r = await run;
    expect(r.exitCode, r.all).toBe(143);
    expect(readFileSync(path.join(cwd, 'term'), 'utf8').trim()).toBe('TERM');
  });
});
