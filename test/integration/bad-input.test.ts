// Bad input: a documented exit code, a one-line reason that names the flag, and nothing written.
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, runCli } from '../helpers/cli.js';
import { newSchemaName, testDb, type TestDb } from '../helpers/db.js';

let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => db.close());

const ok = ['--', process.execPath, fixture('exit-with.mjs'), '0'];

async function rowCount(): Promise<number> {
  const r = await db.rows<{ n: string }>(
    `SELECT (SELECT count(*) FROM ${db.schema}.leases) + (SELECT count(*) FROM ${db.schema}.windows)
          + (SELECT count(*) FROM ${db.schema}.events) + (SELECT count(*) FROM ${db.schema}.jobs) AS n`,
  );
  return Number(r[0]?.n);
}

describe('bad input', () => {
  const usage: Array<[string, string[], RegExp]> = [
    ['malformed cron', ['--name', 'j', '--schedule', '61 * * * *', '--window-from-schedule', ...ok], /--schedule/],
    ['six-field cron', ['--name', 'j', '--schedule', '0 0 * * * *', '--window-from-schedule', ...ok], /--schedule/],
    ['unknown zone', ['--name', 'j', '--schedule', '0 * * * *', '--tz', 'Mars/Olympus', '--window-from-schedule', ...ok], /--tz.*Mars\/Olympus/],
    ['bad duration', ['--name', 'j', '--ttl', 'abc', ...ok], /--ttl.*abc/],
    ['negative duration', ['--name', 'j', '--max-runtime', '-5s', ...ok], /--max-runtime/],
    ['grace that does not fit the TTL', ['--name', 'j', '--ttl', '3s', '--kill-grace', '5s', ...ok], /--kill-grace/],
    ['empty name', ['--name', '', ...ok], /--name/],
    ['name with a control character', ['--name', 'a\u0007b', ...ok], /--name.*control/],
    ['name too long', ['--name', 'x'.repeat(4096), ...ok], /--name.*at most/],
    ['missing command', ['--name', 'j'], /command after `--`/],
    ['unknown flag', ['--name', 'j', '--frobnicate', ...ok], /unknown option/],
    ['bad --on-busy', ['--name', 'j', '--on-busy', 'maybe', ...ok], /--on-busy/],
    ['window flags together', ['--name', 'j', '--window', 'w', '--window-from-schedule', '--schedule', '@daily', ...ok], /either/],
    ['--window-from-schedule without a schedule', ['--name', 'j', '--window-from-schedule', ...ok], /--schedule/],
    ['bad --scheduled-time', ['--name', 'j', '--window', 'w', '--scheduled-time', 'yesterday', ...ok], /--scheduled-time/],
    ['bad --window-offset', ['--name', 'j', '--schedule', '@daily', '--window-from-schedule', '--window-offset', 'one day', ...ok], /--window-offset/],
    ['literal --window-format', ['--name', 'j', '--schedule', '@daily', '--window-from-schedule', '--window-format', "'static'", ...ok], /--window-format/],
    ['bad schema name', ['--name', 'j', '--schema', 'x; DROP TABLE y', ...ok], /--schema/],
  ];
  it.each(usage)('%s: exit 64, names the problem, writes nothing', async (_what, args, message) => {
    const r = await runCli(['run', '--database-url', db.url, '--schema', db.schema, ...args]);
    expect(r.exitCode, r.all).toBe(64);
    expect(r.stderr).toMatch(message);
    expect(await rowCount()).toBe(0);
  });

  it('an unreachable database: exit 69 with the target (never the password)', async () => {
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const r = await runCli(['run', '--database-url', `postgres://u:sentinel-pw-123@127.0.0.1:${port}/db`, '--name', 'j', '--window', 'w', ...ok]);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toMatch(/unreachable/);
    expect(r.all).not.toContain('sentinel-pw-123');
  });

  it('a wrong password: exit 69, and the password is never printed', async () => {
    const url = new URL(db.url);
    url.password = 'sentinel-wrong-pw';
    const r = await runCli(['run', '--database-url', url.toString(), '--schema', db.schema, '--name', 'j', '--window', 'w', ...ok]);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.all).not.toContain('sentinel-wrong-pw');
  });

  it('a schema that was never migrated: exit 69, the message says leasejob migrate', async () => {
    const r = await runCli(['run', '--database-url', db.url, '--schema', newSchemaName('unmigrated'), '--name', 'j', '--window', 'w', ...ok]);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toMatch(/leasejob migrate/);
  });

  it('--help and --version exit 0', async () => {
    const help = await runCli(['run', '--help']);
    expect(help.exitCode).toBe(0);
    expect(help.stdout).toMatch(/--window-from-schedule/);
    expect(help.stdout).toMatch(/Exit codes/);
    const version = await runCli(['--version']);
    expect(version.exitCode).toBe(0);
    expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });
});

describe('leasejob migrate', () => {
  it('is idempotent and safe when several run at once', async () => {
    const schema = newSchemaName('mig');
    const results = await Promise.all(Array.from({ length: 4 }, () => runCli(['migrate', '--database-url', db.url, '--schema', schema])));
    for (const r of results) expect(r.exitCode, r.all).toBe(0);
    const versions = await db.rows<{ version: number }>(`SELECT version FROM ${schema}.migrations ORDER BY version`);
    expect(versions.map((v) => v.version)[0]).toBe(1);
    expect(new Set(versions.map((v) => v.version)).size).toBe(versions.length);
    const again = await runCli(['migrate', '--database-url', db.url, '--schema', schema]);
    expect(again.exitCode).toBe(0);
    expect(again.stderr).toMatch(/schema up to date/);
  });

  it('refuses a schema from a newer leasejob: exit 69', async () => {
    const schema = newSchemaName('newer');
    expect((await runCli(['migrate', '--database-url', db.url, '--schema', schema])).exitCode).toBe(0);
    await db.rows(`INSERT INTO ${schema}.migrations (version, name) VALUES (999, 'future')`);
    const r = await runCli(['migrate', '--database-url', db.url, '--schema', schema]);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toMatch(/newer than this leasejob/);
  });
});
