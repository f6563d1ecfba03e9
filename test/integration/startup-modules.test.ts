// What a start loads (issue 7, scripts/bundle.mjs): Node built-ins that the bundled libraries load at
// import time but `run` does not need stay unloaded, through the real CLI with a real child and
// PostgreSQL, and they still load where they are needed (Web Crypto for SCRAM and MD5 logins).
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { withHbaLines } from '../helpers/hba.js';
import { tempDirPerTest } from '../helpers/temp.js';

/** Loaded by pino's transports, sonic-boom's one check, pg's Web Crypto and dns, performance.now(), node:timers/promises and createRequire. */
const NOT_ON_THE_RUN_PATH = ['worker_threads', 'assert', 'crypto', 'perf_hooks', 'dns', 'timers/promises', 'module'];

const newTmp = tempDirPerTest('leasejob-modules-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

/** The env that makes the CLI write its loaded built-ins to `file` (test/fixtures/module-list.cjs). */
const listing = (file: string): Record<string, string> => ({
  NODE_OPTIONS: `--require=${JSON.stringify(fixture('module-list.cjs'))}`, // quoted: a checkout path may hold spaces
  LEASEJOB_TEST_MODULE_LIST: file,
});
const loaded = (file: string): string[] => readFileSync(file, 'utf8').split('\n');

async function completed(job: string, window: string): Promise<boolean> {
  const rows = await db.rows(
    `SELECT 1 FROM ${db.schema}.windows WHERE job = $1 AND window_key = $2 AND completed_at IS NOT NULL`,
    [job, window],
  );
  return rows.length === 1;
}

describe('built-in modules a start loads', () => {
  it('a run with PostgreSQL and a child loads none of the modules kept off its path', async () => {
    const file = path.join(newTmp(), 'modules');
    const r = await runCli(
      ['run', '--database-url', db.url, '--schema', db.schema, '--name', 'mods', '--window', 'w1', '--', 'true'],
      listing(file),
    );
    expect(r.exitCode, r.all).toBe(0);
    expect(await completed('mods', 'w1')).toBe(true);
    const modules = loaded(file);
    expect(modules).toContain('child_process'); // the list is real: the child was spawned
    expect(modules).toContain('net');
    expect(modules.filter((m) => NOT_ON_THE_RUN_PATH.includes(m))).toEqual([]);
  });

  it('a contender that finds the lease busy loads none of them either', async () => {
    const tmp = newTmp();
    const release = path.join(tmp, 'release');
    const holder = startCli([
      'run',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--name',
      'mods-busy',
      '--window',
      'w1',
      '--',
      process.execPath,
      fixture('wait-for-file.mjs'),
      release,
    ]);
    await waitFor(
      'the holder to take the lease',
      async () =>
        (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'mods-busy' AND owner IS NOT NULL`)).length ===
        1,
    );
    const file = path.join(tmp, 'modules');
    const r = await runCli(
      ['run', '--database-url', db.url, '--schema', db.schema, '--name', 'mods-busy', '--window', 'w1', '--', 'true'],
      listing(file),
    );
    expect(r.exitCode, r.all).toBe(0);
    expect(logLines(r.stderr).map((l) => l.msg)).toContain('lease busy');
    expect(loaded(file).filter((m) => NOT_ON_THE_RUN_PATH.includes(m))).toEqual([]);
    writeFileSync(release, '');
    expect((await holder).exitCode).toBe(0);
  });

  it('a run with the embedded store loads none of them', async () => {
    const tmp = newTmp();
    const file = path.join(tmp, 'modules');
    const r = await runCli(
      ['run', '--state-file', path.join(tmp, 'state.db'), '--name', 'mods', '--window', 'w1', '--', 'true'],
      {
        ...listing(file),
        LEASEJOB_DATABASE_URL: undefined,
        DATABASE_URL: undefined,
        PGHOST: undefined,
      },
    );
    expect(r.exitCode, r.all).toBe(0);
    expect(loaded(file).filter((m) => NOT_ON_THE_RUN_PATH.includes(m))).toEqual([]);
  });

  for (const method of ['scram-sha-256', 'md5'] as const) {
    it(`a login with ${method} loads Web Crypto when it needs it, and the run completes`, async (ctx) => {
      const role = `lj_mods_${method.slice(0, 3)}_${process.pid}`;
      const password = 'a-password';
      await db.rows(`SET password_encryption = '${method}'; CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
      try {
        const granted = await runCli(['migrate', '--database-url', db.url, '--schema', db.schema, '--grant-to', role]);
        expect(granted.exitCode, granted.all).toBe(0);
        const url = new URL(db.url);
        url.username = role;
        url.password = password;
        const tmp = newTmp();
        const r = await withHbaLines(
          db,
          [`host all ${role} 127.0.0.1/32 ${method}`, `host all ${role} ::1/128 ${method}`],
          async () => {
            // The reload takes a moment: until then the server asks for a plain password, which
            // needs no crypto. Each attempt is its own window.
            let n = 0;
            return await waitFor(`the server to ask for ${method}`, async () => {
              const file = path.join(tmp, `modules-${++n}`);
              const attempt = await runCli(
                [
                  'run',
                  '--database-url',
                  url.toString(),
                  '--schema',
                  db.schema,
                  '--name',
                  `mods-${method}`,
                  '--window',
                  `w${n}`,
                  '--',
                  'true',
                ],
                listing(file),
              );
              expect(attempt.exitCode, attempt.all).toBe(0);
              return loaded(file).includes('crypto') ? { attempt, window: `w${n}` } : undefined;
            });
          },
        );
        if (r === undefined) ctx.skip();
        expect(await completed(`mods-${method}`, r!.window)).toBe(true);
      } finally {
        await db.rows(`DROP OWNED BY ${role}; DROP ROLE IF EXISTS ${role}`);
      }
    });
  }
});
