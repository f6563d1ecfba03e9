// The embedded one-host store: no database server, several processes sharing one SQLite file.
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { beforeEach, describe, expect, it } from 'vitest';
import { fixture, logLines, ROOT, runCli, scrapeOnce, startCli, waitFor } from '../helpers/cli.js';
import { faketimeEnv, faketimeLibrary } from '../helpers/faketime.mjs';
import { tempDirPerTest } from '../helpers/temp.js';

// A fresh directory per test, removed after it.
const testDir = tempDirPerTest('leasejob-embedded-');
let dir: string;
let state: string;
beforeEach(() => {
  dir = testDir();
  state = path.join(dir, 'state', 'leasejob.db');
  // A state file given by hand needs its directory (issue 20: a typo is not a second store).
  mkdirSync(path.dirname(state));
});
// No database variables at all: the embedded store is the default.
const noDb = {
  DATABASE_URL: undefined,
  LEASEJOB_DATABASE_URL: undefined,
  KUBERNETES_SERVICE_HOST: undefined,
  PGHOST: undefined,
  PGPORT: undefined,
  PGDATABASE: undefined,
  PGUSER: undefined,
  PGPASSWORD: undefined,
  PGSERVICE: undefined,
};
const env = (): Record<string, string | undefined> => ({ ...noDb, XDG_STATE_HOME: path.join(dir, 'xdg') });

describe('embedded store (SQLite)', () => {
  it('is used when no database is configured, at $XDG_STATE_HOME/leasejob/leasejob.db, and says so', async () => {
    const r = await runCli(
      ['run', '--name', 'e1', '--window', 'w', '--', process.execPath, fixture('exit-with.mjs'), '0'],
      env(),
    );
    expect(r.exitCode, r.all).toBe(0);
    const file = path.join(dir, 'xdg', 'leasejob', 'leasejob.db');
    expect(existsSync(file)).toBe(true);
    expect(logLines(r.stderr).find((l) => l.msg === 'using store')).toMatchObject({ store: 'sqlite', location: file });
    const status = await runCli(['status'], env());
    expect(status.stdout).toMatch(new RegExp(`^store: sqlite, ${file.replace(/[/.]/g, '\\$&')}, time `));
    const json = JSON.parse((await runCli(['status', '--json'], env())).stdout);
    // A token of the embedded store's hybrid logical clock (docs/fencing.md): digits, not 1.
    expect(json).toMatchObject({
      store: 'sqlite',
      jobs: [{ name: 'e1', lastWindow: 'w', generation: expect.stringMatching(/^[1-9][0-9]*$/) }],
    });
  });

  it('a libpq connection variable chooses PostgreSQL, as psql would connect with it; PGSERVICE is refused (64), nothing written', async () => {
    // Port 1: nothing listens there. (Each variable alone: test/unit/store-choice.test.ts.)
    const r = await runCli(
      ['run', '--name', 'pgenv', '--window', 'w', '--', process.execPath, fixture('exit-with.mjs'), '0'],
      { ...env(), PGPORT: '1' },
    );
    expect(r.exitCode, r.all).toBe(69);
    expect(logLines(r.stderr).find((l) => l.msg === 'using store')).toMatchObject({ store: 'postgresql' });
    expect(r.stderr).toMatch(/database unreachable at localhost \(PG environment\)/);
    const svc = await runCli(['status'], { ...env(), PGSERVICE: 'prod' });
    expect(svc.exitCode, svc.all).toBe(64);
    expect(svc.stderr.trim()).toMatch(
      /^leasejob: PGSERVICE is set \("prod"\), but leasejob does not read pg_service.conf; give the connection as LEASEJOB_DATABASE_URL/,
    );
    expect(svc.stderr.trim().split('\n')).toHaveLength(1);
    expect(existsSync(path.join(dir, 'xdg'))).toBe(false);
  });

  it('the exporter on the embedded store: no schema version it cannot read, the shipped one still', async () => {
    const seeded = await runCli(['run', '--state-file', state, '--name', 'exp', '--window', 'w', '--', 'true'], env());
    expect(seeded.exitCode, seeded.all).toBe(0);
    const text = await scrapeOnce(['--state-file', state], env());
    expect(text).toMatch(/^leasejob_up 1$/m);
    expect(text).not.toMatch(/^leasejob_schema_version /m);
    expect(text).toMatch(/^leasejob_schema_version_expected \d+$/m);
  });

  it('ten processes racing on one window: exactly one child runs', async () => {
    const marks = path.join(dir, 'marks.txt');
    const runs = Array.from({ length: 10 }, () =>
      startCli(
        [
          'run',
          '--state-file',
          state,
          '--name',
          'race',
          '--window',
          'w',
          '--ttl',
          '15s',
          '--kill-grace',
          '1s',
          '--',
          process.execPath,
          fixture('append-pid.mjs'),
          marks,
          '1500',
        ],
        env(),
      ),
    );
    for (const r of await Promise.all(runs)) expect(r.exitCode, r.all).toBe(0);
    expect(readFileSync(marks, 'utf8').trim().split('\n')).toHaveLength(1);
    const hist = JSON.parse(
      (await runCli(['history', '--state-file', state, '--name', 'race', '--json'], env())).stdout,
    ) as Array<{ seq: string; kind: string }>;
    expect(hist.map((e) => Number(e.seq))).toEqual(hist.map((_, i) => i + 1));
    expect(hist.filter((e) => e.kind === 'window-completed')).toHaveLength(1);
  });

  it('a crashed holder on this host is taken over after expiry and its window resumed', async () => {
    const pidFile = path.join(dir, 'crash.pid');
    const holder = startCli(
      [
        'run',
        '--state-file',
        state,
        '--name',
        'crash',
        '--window',
        'w',
        '--ttl',
        '3s',
        '--kill-grace',
        '500ms',
        '--',
        process.execPath,
        fixture('forever.mjs'),
        pidFile,
      ],
      env(),
    );
    await waitFor('child ready', () => existsSync(pidFile));
    holder.kill('SIGKILL');
    await holder;
    const retry = await runCli(
      [
        'run',
        '--state-file',
        state,
        '--name',
        'crash',
        '--window',
        'w',
        '--ttl',
        '3s',
        '--kill-grace',
        '500ms',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      env(),
    );
    expect(retry.exitCode, retry.all).toBe(0);
    // Its process is gone on this boot: the wait says so, and until when (the lease is waited out all the same).
    const waited = logLines(retry.stderr).find((l) => l.msg === 'lease holder gone, waiting for its lease to expire');
    expect(waited, retry.stderr).toMatchObject({ level: 'info', holderGone: true, holder: expect.any(String) });
    expect(waited?.expiresInMs).toBeGreaterThan(0);
    expect(Date.parse(String(waited?.expiresAt))).toBeGreaterThan(0);
    const hist = JSON.parse(
      (await runCli(['history', '--state-file', state, '--name', 'crash', '--json'], env())).stdout,
    ) as Array<{ kind: string; detail: Record<string, unknown> }>;
    expect(hist.map((e) => e.kind)).toContain('stale-takeover');
    expect(hist.find((e) => e.kind === 'window-completed')?.detail.attempt).toBe(2);
  });

  const FAKETIME_LIB = faketimeLibrary();
  it.skipIf(!FAKETIME_LIB)('a wall-clock jump during a run neither expires nor extends the lease', async () => {
    const clock = path.join(dir, 'clock');
    writeFileSync(clock, '+0s\n');
    const skew = faketimeEnv(FAKETIME_LIB!, clock);
    // TTL 10 s: the holder must still hold when the contender and status look, on a busy machine too.
    const pidFile = path.join(dir, 'jump.pid');
    const holder = startCli(
      [
        'run',
        '--state-file',
        state,
        '--name',
        'jump',
        '--window',
        'w',
        '--ttl',
        '10s',
        '--kill-grace',
        '500ms',
        '--',
        process.execPath,
        fixture('forever.mjs'),
        pidFile,
      ],
      { ...env(), ...skew },
    );
    await waitFor('child ready', () => existsSync(pidFile));
    // Forward one hour: a wall-clock expiry would be long past. Every process sees the jump.
    writeFileSync(clock, '+3600s\n');
    const contender = await runCli(
      [
        'run',
        '--state-file',
        state,
        '--name',
        'jump',
        '--window',
        'w',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      { ...env(), ...skew },
    );
    expect(contender.exitCode, contender.all).toBe(0);
    expect(logLines(contender.stderr).some((l) => l.msg === 'lease busy')).toBe(true);
    // Backward one hour: a wall-clock lease would now look valid for an hour more.
    writeFileSync(clock, '-3600s\n');
    const status = JSON.parse(
      (await runCli(['status', '--state-file', state, '--name', 'jump', '--json'], { ...env(), ...skew })).stdout,
    );
    expect(status.jobs[0].held).toBe(true);
    expect(status.jobs[0].expiresInMs).toBeLessThanOrEqual(10_000);
    holder.kill('SIGKILL');
    await holder;
    // Dead holder, no renewals: the lease expires within the TTL on the monotonic clock.
    await waitFor(
      'lease to expire',
      async () => {
        const s = JSON.parse(
          (await runCli(['status', '--state-file', state, '--name', 'jump', '--json'], { ...env(), ...skew })).stdout,
        );
        return s.jobs[0].held === false;
      },
      30_000,
      200,
    );
  });

  it('a state directory that cannot be created: exit 69, one line naming it and what to do; the child never runs', async () => {
    const notADir = path.join(dir, 'a-file');
    writeFileSync(notADir, '');
    const marker = path.join(dir, 'ran');
    for (const args of [
      [
        'run',
        '--name',
        'e1',
        '--',
        process.execPath,
        '-e',
        `require('fs').writeFileSync(${JSON.stringify(marker)}, '')`,
      ],
      ['migrate'],
    ]) {
      const r = await runCli(args, { ...noDb, XDG_STATE_HOME: notADir });
      expect(r.exitCode, r.all).toBe(69);
      expect(r.stderr.trim()).toBe(
        `leasejob: state file ${notADir}/leasejob/leasejob.db: cannot create its directory ${notADir}/leasejob (ENOTDIR); give a writable --state-file or LEASEJOB_STATE_FILE, or set LEASEJOB_DATABASE_URL`,
      );
    }
    expect(existsSync(marker)).toBe(false);
  });

  it('installed with one Node.js and run with another: exit 69, one line saying so and what to do; the child never runs', async () => {
    const marker = path.join(dir, 'ran');
    const child = ['--', process.execPath, '-e', `require('fs').writeFileSync(${JSON.stringify(marker)}, '')`];
    const otherNode = { ...env(), NODE_OPTIONS: `--require ${fixture('other-node-sqlite.cjs')}` };
    for (const args of [['run', '--name', 'abi', ...child], ['migrate']]) {
      const r = await runCli(args, otherNode);
      expect(r.exitCode, r.all).toBe(69);
      expect(r.stderr.trim()).toBe(
        `leasejob: the embedded store's SQLite module (better-sqlite3) was built for another Node.js (module version 115; ` +
          `Node.js ${process.version} needs 137): run \`npm rebuild better-sqlite3\` (or \`npm ci\`) where leasejob is ` +
          `installed, with the Node.js that runs it; or use the single file (\`npm run single-file\`, no native module); ` +
          `or set LEASEJOB_DATABASE_URL`,
      );
    }
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(path.join(dir, 'xdg', 'leasejob', 'leasejob.db'))).toBe(false);
  });

  it('a state file that is a directory: exit 64 saying so, for run and status alike', async () => {
    for (const args of [['run', '--name', 'd', '--window', 'w', '--', 'true'], ['status']]) {
      const r = await runCli([...args.slice(0, 1), '--state-file', dir, ...args.slice(1)], noDb);
      expect(r.exitCode, r.all).toBe(64);
      expect(r.stderr.trim()).toBe(
        `leasejob: the state file ${dir} is a directory; give a file path (--state-file or LEASEJOB_STATE_FILE), e.g. ${path.join(dir, 'leasejob.db')}.`,
      );
    }
  });

  it('a window that keeps failing behind ten newer open ones is still seen by check; status counts them all', async () => {
    const state = ['--state-file', path.join(dir, 'fail.db')];
    const fail = (window: string) =>
      runCli(['run', ...state, '--name', 'flaky', '--window', window, '--', 'false'], noDb);
    for (let i = 0; i < 3; i++) expect((await fail('w')).exitCode).toBe(1);
    for (let i = 1; i <= 10; i++) expect((await fail(`newer${i}`)).exitCode).toBe(1);
    const check = await runCli(['check', ...state, '--name', 'flaky'], noDb);
    expect(check.exitCode, check.all).toBe(1);
    expect(check.stdout).toMatch(/WARNING flaky: failing: window w failed 3 attempts/);
    const status = JSON.parse((await runCli(['status', ...state, '--name', 'flaky', '--json'], noDb)).stdout);
    expect(status.jobs[0].openCount).toBe(11);
    expect(status.jobs[0].openWindows.map((w: { window: string }) => w.window)).toEqual([
      'w',
      ...Array.from({ length: 10 }, (_, i) => `newer${i + 1}`),
    ]);
  });

  it('a state file that is a FIFO: exit 64 saying so, nothing created beside it', async () => {
    const fifo = path.join(dir, 'fifo');
    await execa('mkfifo', [fifo]);
    for (const args of [['run', '--name', 'f', '--window', 'w', '--', 'true'], ['status']]) {
      const r = await runCli([...args.slice(0, 1), '--state-file', fifo, ...args.slice(1)], noDb);
      expect(r.exitCode, r.all).toBe(64);
      expect(r.stderr.trim()).toBe(
        `leasejob: the state file ${fifo} is not a regular file (a device, a FIFO or a socket); give the path of a file (--state-file or LEASEJOB_STATE_FILE).`,
      );
    }
    expect(readdirSync(dir).filter((f) => f.startsWith('fifo'))).toEqual(['fifo']);
  });

  it('status, history, check, release and the exporter never create the store: a mistyped --state-file is exit 69, not an empty, healthy store', async () => {
    const typo = path.join(dir, 'typo.db');
    const reads = [
      ['status'],
      ['status', '--json'],
      ['history', '--name', 'x'],
      ['release', '--name', 'x'],
      ['exporter', '--port', '0'],
      ['check'],
    ];
    for (const args of reads) {
      const r = await runCli([...args, '--state-file', typo], noDb);
      // check: the monitoring plugin's UNKNOWN.
      expect(r.exitCode, `${args.join(' ')}: ${r.all}`).toBe(args[0] === 'check' ? 3 : 69);
      expect(r.stderr.trim(), args.join(' ')).toBe(
        `leasejob: no embedded store at ${typo}: no job has run with it. If the jobs run as another user, or with another --state-file, LEASEJOB_STATE_FILE or XDG_STATE_HOME, give theirs (and run as their user); \`leasejob migrate\` creates an empty one`,
      );
    }
    const json = await runCli(['check', '--json', '--state-file', typo], noDb);
    expect(JSON.parse(json.stdout)).toMatchObject({ error: { code: 'E_STATE_FILE', exitCode: 3 } });
    expect(existsSync(typo)).toBe(false);
    // `migrate` creates it, as a run does; then it reads as an empty store.
    expect((await runCli(['migrate', '--state-file', typo], noDb)).exitCode).toBe(0);
    const check = await runCli(['check', '--state-file', typo], noDb);
    expect(check.exitCode, check.all).toBe(0);
    expect(check.stdout).toMatch(/^OK: 0 job\(s\) healthy/);
  });

  it('an explicit --state-file (or LEASEJOB_STATE_FILE) in a directory that does not exist: exit 64 naming it, nothing created', async () => {
    const missing = path.join(dir, 'no-such-dir', 'leasejob.db');
    const marker = path.join(dir, 'ran');
    const child = ['--', process.execPath, '-e', `require('fs').writeFileSync(${JSON.stringify(marker)}, '')`];
    for (const [args, given, extra] of [
      [['run', '--state-file', missing, '--name', 'm', '--window', 'w', ...child], '--state-file', {}],
      [['migrate', '--state-file', missing], '--state-file', {}],
      [['status', '--state-file', missing], '--state-file', {}],
      [['run', '--name', 'm', '--window', 'w', ...child], 'LEASEJOB_STATE_FILE', { LEASEJOB_STATE_FILE: missing }],
    ] as Array<[string[], string, Record<string, string>]>) {
      const r = await runCli(args, { ...noDb, ...extra });
      expect(r.exitCode, r.all).toBe(64);
      expect(r.stderr.trim()).toBe(
        `leasejob: the directory of the state file ${missing} (${given}) does not exist; create it (mkdir -p ${path.dirname(missing)}) or correct the path.`,
      );
    }
    expect(existsSync(path.dirname(missing))).toBe(false);
    expect(existsSync(marker)).toBe(false);
    // The default location is still created on first use.
    expect((await runCli(['run', '--name', 'm', '--window', 'w', '--', 'true'], env())).exitCode).toBe(0);
    expect(existsSync(path.join(dir, 'xdg', 'leasejob', 'leasejob.db'))).toBe(true);
  });

  it('refuses to start inside Kubernetes, or with --require-shared, without a shared database', async () => {
    const k8s = await runCli(
      ['run', '--name', 'k', '--window', 'w', '--', process.execPath, fixture('exit-with.mjs'), '0'],
      { ...env(), KUBERNETES_SERVICE_HOST: '10.0.0.1' },
    );
    expect(k8s.exitCode, k8s.all).toBe(64);
    expect(k8s.stderr).toMatch(/inside Kubernetes .* every pod would run the job; set LEASEJOB_DATABASE_URL/);
    const shared = await runCli(
      [
        'run',
        '--require-shared',
        '--name',
        'k',
        '--window',
        'w',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      env(),
    );
    expect(shared.exitCode, shared.all).toBe(64);
    expect(shared.stderr).toMatch(/--require-shared/);
    for (const value of ['1', 'true', 'yes', 'ON']) {
      const r = await runCli(
        ['run', '--name', 'k', '--window', 'w', '--', process.execPath, fixture('exit-with.mjs'), '0'],
        { ...env(), LEASEJOB_REQUIRE_SHARED: value },
      );
      expect(r.exitCode, `${value}: ${r.all}`).toBe(64);
      expect(r.stderr, value).toMatch(/LEASEJOB_REQUIRE_SHARED\) was given/);
    }
    // A safety switch fails closed: a value it does not know is refused, not read as off.
    const unknown = await runCli(
      ['run', '--name', 'k', '--window', 'w', '--', process.execPath, fixture('exit-with.mjs'), '0'],
      { ...env(), LEASEJOB_REQUIRE_SHARED: 'enabled' },
    );
    expect(unknown.exitCode, unknown.all).toBe(64);
    expect(unknown.stderr.trim()).toBe(
      'leasejob: Expected LEASEJOB_REQUIRE_SHARED to be 1, true, yes or on (or 0, false, no, off), got "enabled".',
    );
    expect(existsSync(path.join(dir, 'xdg'))).toBe(false);
  });

  it('empty LEASEJOB_STATE_FILE, LEASEJOB_LOG_LEVEL and LEASEJOB_REQUIRE_SHARED mean unset, as a chart renders them', async () => {
    const r = await runCli(
      ['run', '--name', 'empty-env', '--window', 'w', '--', process.execPath, fixture('exit-with.mjs'), '0'],
      { ...env(), LEASEJOB_STATE_FILE: '', LEASEJOB_LOG_LEVEL: '', LEASEJOB_REQUIRE_SHARED: '' },
    );
    expect(r.exitCode, r.all).toBe(0);
    expect(logLines(r.stderr).find((l) => l.msg === 'using store')).toMatchObject({
      location: path.join(dir, 'xdg', 'leasejob', 'leasejob.db'),
    });
    const flag = await runCli(['status', '--state-file', ''], env());
    expect(flag.exitCode, flag.all).toBe(64);
    expect(flag.stderr.trim()).toBe('leasejob: Expected `--state-file` to be a file path, got an empty string.');
  });

  it("the README's first command, as written, prints once when run twice in the same minute", async () => {
    const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const first = readme.split('\n').find((l) => l.trim().startsWith('npm ci &&'));
    expect(first, 'README starts with `npm ci && npx leasejob run ...`').toBeDefined();
    const cmd = first!
      .trim()
      .replace(/^npm ci && /, '')
      .replace(/\s+#.*$/, '');
    expect(cmd).toMatch(/^npx leasejob run /);
    // The window a run names is the minute it runs in, or the next one from 10 s before it (a
    // host clock lagging the one that fired it; MAX_LAG_TOLERANCE_MS): two runs are of one
    // window when the minute of (their time + 10 s) is the same.
    const windowOf = (ms: number): number => Math.floor((ms + 10_000) / 60_000);
    for (let attempt = 0; attempt < 3; attempt++) {
      // Started early in a window, so that both runs fit in it even on a slow machine.
      const into = (Date.now() + 10_000) % 60_000;
      if (into > 30_000) await new Promise((r) => setTimeout(r, 60_000 - into + 200));
      const before = windowOf(Date.now());
      const shell = async (): Promise<string> => {
        const r = await execa('sh', ['-c', cmd], {
          cwd: ROOT,
          env: { ...env(), XDG_STATE_HOME: path.join(dir, `readme-${attempt}`) },
          reject: false,
        });
        expect(r.exitCode, `${cmd}\n${r.stderr}`).toBe(0); // 127 with "leasejob: not found": see npm-pack.test.ts
        return r.stdout;
      };
      const out = (await shell()) + (await shell());
      if (windowOf(Date.now()) !== before) continue; // crossed into the next window: two runs, try again
      expect(out.trim().split('\n')).toHaveLength(1);
      return;
    }
    throw new Error('could not run the command twice within one minute');
  }, 240_000); // up to three windows, each waited for from its start
});
