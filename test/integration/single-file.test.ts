// Issue 16: leasejob as one executable that needs nothing but glibc. Built here with the
// npm script's own builder (the pinned Node from the npm registry, cached after the first
// build), then run as a host without Node would: from an empty directory, `env -i
// PATH=/usr/bin:/bin`, and, where this runs as root, in a mount namespace where the machine's
// /usr/bin/node is not executable, so nothing can quietly fall back to it. Children are `sh`
// and `python3`; the stores are the test PostgreSQL and the embedded one (node:sqlite inside
// the file). The test is skipped, saying why, only when the file cannot be built.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { logLines, runCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir, tempDirs } from '../helpers/temp.js';
import { ROOT } from '../helpers/wait.js';

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
    const interp = execFileSync('readelf', ['-l', FILE], { encoding: 'utf8' });
    expect(interp).toMatch(/ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1/);
    const version = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version as string;
    expect(execFileSync(FILE, ['--version'], { env: {}, cwd: dirs(), encoding: 'utf8' }).trim()).toBe(version);
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
    expect(readFileSync(path.join(cwd, 'runs'), 'utf8')).toBe('1\n');
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

  it('a bad flag: exit 64 and a message, nothing written', async () => {
    const cwd = dirs();
    const r = await startFile(['run', '--name', 'x', '--window', 'w', '--ttl', 'soon', '--', 'true'], cwd);
    expect(r.exitCode, r.all).toBe(64);
    expect(r.stderr).toMatch(/--ttl/);
    writeFileSync(path.join(cwd, '.keep'), '');
    expect(execFileSync('ls', ['-A', cwd], { encoding: 'utf8' }).trim()).toBe('.keep');
  });
});
