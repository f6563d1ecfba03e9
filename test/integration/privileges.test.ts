// Least privilege: a runner role granted by `migrate --grant-to` can run, fence and read status,
// and can neither write the tables directly nor drop or truncate them. Secrets stay out of logs.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, runCli, waitFor } from '../helpers/cli.js';
import { newSchemaName, testDb, type TestDb } from '../helpers/db.js';

let admin: TestDb;
let schema: string;
let role: string;
let runnerUrl: string;
const password = `sentinel-${randomBytes(6).toString('hex')}`;

beforeAll(async () => {
  admin = await testDb({ migrated: false });
  schema = newSchemaName('priv');
  role = `lj_runner_${randomBytes(4).toString('hex')}`;
  await admin.rows(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
  const url = new URL(admin.url);
  url.username = role;
  url.password = password;
  runnerUrl = url.toString();
});
afterAll(async () => admin.close());

describe('least privilege', () => {
  it('migrate --grant-to gives a runner role what run needs; run, fence and status work under it', async () => {
    const m = await runCli(['migrate', '--database-url', admin.url, '--schema', schema, '--grant-to', role]);
    expect(m.exitCode, m.all).toBe(0);
    const r = await runCli([
      'run',
      '--database-url',
      runnerUrl,
      '--schema',
      schema,
      '--name',
      'priv-job',
      '--window',
      'w',
      '--pass-database-url',
      '--log-level',
      'trace',
      '--',
      process.execPath,
      fixture('assert-once.mjs'),
    ]);
    expect(r.exitCode, r.all).toBe(0);
    expect(r.stdout).toContain('fenced ok');
    // The password is never in a log line, even at trace level.
    expect(r.stderr).not.toContain(password);
    const status = await runCli(['status', '--database-url', runnerUrl, '--schema', schema, '--json']);
    expect(status.exitCode, status.all).toBe(0);
    expect(JSON.parse(status.stdout).jobs[0]).toMatchObject({ name: 'priv-job', lastWindow: 'w' });
    expect((await runCli(['check', '--database-url', runnerUrl, '--schema', schema])).exitCode).toBe(0);
  });

  it('an upgrade that replaces functions (004, 006) keeps the grant, SECURITY DEFINER and the pinned search_path', async () => {
    // As if the schema had been granted before those migrations: they are applied again over it.
    await admin.rows(`DELETE FROM ${schema}.migrations WHERE version IN (4, 6)`);
    const m = await runCli(['migrate', '--database-url', admin.url, '--schema', schema]);
    expect(m.exitCode, m.all).toBe(0);
    expect(m.stderr).toMatch(/"applied":\[4,6\]/);
    const fns = await admin.rows<{ name: string; definer: boolean; config: string[] | null }>(
      `SELECT p.proname AS name, p.prosecdef AS definer, p.proconfig AS config FROM pg_proc p
        WHERE p.pronamespace = $1::regnamespace AND p.proname IN ('acquire', 'renew', 'finish') ORDER BY 1`,
      [schema],
    );
    expect(fns.map((f) => [f.name, f.definer, f.config])).toEqual(
      ['acquire', 'finish', 'renew'].map((name) => [name, true, [`search_path="${schema}", pg_catalog, pg_temp`]]),
    );
    const r = await runCli([
      'run',
      '--database-url',
      runnerUrl,
      '--schema',
      schema,
      '--name',
      'priv-upgraded',
      '--window',
      'w',
      '--ttl',
      '3s',
      '--kill-grace',
      '500ms',
      '--',
      process.execPath,
      '-e',
      'setTimeout(() => {}, 2500)',
    ]);
    expect(r.exitCode, r.all).toBe(0);
    // It ran long enough to renew under the runner role.
    expect(
      await admin.rows(`SELECT 1 FROM ${schema}.events WHERE job = 'priv-upgraded' AND kind = 'window-completed'`),
    ).toHaveLength(1);
    expect(
      await admin.rows(`SELECT 1 FROM ${schema}.leases WHERE name = 'priv-upgraded' AND renewed_at > acquired_at`),
    ).toHaveLength(1);
  });

  it('the runner role cannot write, delete, truncate or drop the tables directly', async () => {
    const c = new pg.Client({ connectionString: runnerUrl });
    await c.connect();
    try {
      const attempts = [
        `UPDATE ${schema}.leases SET expires_at = now()`,
        `DELETE FROM ${schema}.events`,
        `INSERT INTO ${schema}.windows (job, window_key, owner, generation) VALUES ('x', 'y', 'z', 1)`,
        `TRUNCATE ${schema}.windows`,
        `DROP TABLE ${schema}.leases`,
        `ALTER TABLE ${schema}.jobs ADD COLUMN evil int`,
        `CREATE TABLE ${schema}.evil (id int)`,
      ];
      for (const sql of attempts) {
        await expect(c.query(sql), sql).rejects.toMatchObject({ code: '42501' });
      }
    } finally {
      await c.end();
    }
  });

  it('a role without the grant cannot call the functions: exit 69 with what to do, nothing written', async () => {
    const other = `lj_other_${randomBytes(4).toString('hex')}`;
    await admin.rows(`CREATE ROLE ${other} LOGIN PASSWORD '${password}'`);
    const url = new URL(admin.url);
    url.username = other;
    url.password = password;
    const r = await runCli([
      'run',
      '--database-url',
      url.toString(),
      '--schema',
      schema,
      '--name',
      'denied',
      '--window',
      'w',
      '--',
      process.execPath,
      fixture('exit-with.mjs'),
      '0',
    ]);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toMatch(/permission denied.*--grant-to/);
    expect(r.all).not.toContain(password);
    expect(await admin.rows(`SELECT 1 FROM ${schema}.leases WHERE name = 'denied'`)).toHaveLength(0);
  });

  it('migrate under the runner role: exit 69 saying to run it as the schema owner', async () => {
    const fresh = `lj_mig_${randomBytes(4).toString('hex')}`;
    const r = await runCli(['migrate', '--database-url', runnerUrl, '--schema', fresh]);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr.trim()).toMatch(
      /^leasejob: permission denied on .*; migrate creates and replaces the schema's tables and functions, so run it as the schema's owner/,
    );
    expect(r.all).not.toContain(password);
  });

  it('release under the runner role: exit 69 saying it needs the schema owner (not --grant-to); the lease stays', async () => {
    const hold = runCli([
      'run',
      '--database-url',
      admin.url,
      '--schema',
      schema,
      '--name',
      'priv-held',
      '--window',
      'w',
      '--ttl',
      '30s',
      '--',
      process.execPath,
      '-e',
      'setTimeout(() => {}, 4000)',
    ]);
    await waitFor(
      'the lease to be held',
      async () =>
        (await admin.rows(`SELECT 1 FROM ${schema}.leases WHERE name = 'priv-held' AND expires_at > now()`)).length > 0,
    );
    const r = await runCli(['release', '--database-url', runnerUrl, '--schema', schema, '--name', 'priv-held']);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr.trim()).toMatch(
      /^leasejob: permission denied on .*; release ends a lease outside the runners' rules, so run it as the schema owner/,
    );
    expect(r.stderr).not.toContain('--grant-to');
    expect(r.all).not.toContain(password);
    expect(
      await admin.rows(`SELECT 1 FROM ${schema}.leases WHERE name = 'priv-held' AND expires_at > now()`),
    ).toHaveLength(1);
    // The owner can.
    const owner = await runCli([
      'release',
      '--database-url',
      admin.url,
      '--schema',
      schema,
      '--name',
      'priv-held',
      '--force',
    ]);
    expect(owner.exitCode, owner.all).toBe(0);
    await hold;
  });

  it('pause, resume and mark under the runner role: exit 69 saying to run them as the schema owner; nothing written', async () => {
    const ran = await runCli([
      'run',
      '--database-url',
      runnerUrl,
      '--schema',
      schema,
      '--name',
      'priv-op',
      '--window',
      'w',
      '--',
      process.execPath,
      '-e',
      '',
    ]);
    expect(ran.exitCode, ran.all).toBe(0);
    const before = await admin.rows(`SELECT version, paused_at FROM ${schema}.jobs WHERE name = 'priv-op'`);
    for (const args of [['pause', '--reason', 'x'], ['resume'], ['mark', '--window', 'w2', '--done']]) {
      const r = await runCli([
        args[0]!,
        '--database-url',
        runnerUrl,
        '--schema',
        schema,
        '--name',
        'priv-op',
        ...args.slice(1),
      ]);
      expect(r.exitCode, r.all).toBe(69);
      expect(r.stderr.trim()).toMatch(
        /^leasejob: permission denied on .*; pause, resume, mark and release change the job outside the runners' rules, so run them as the schema owner/,
      );
      expect(r.all).not.toContain(password);
    }
    expect(await admin.rows(`SELECT version, paused_at FROM ${schema}.jobs WHERE name = 'priv-op'`)).toEqual(before);
  });

  it('--grant-to a role that does not exist: exit 69, says so, nothing applied', async () => {
    const fresh = newSchemaName('priv');
    const r = await runCli([
      'migrate',
      '--database-url',
      admin.url,
      '--schema',
      fresh,
      '--grant-to',
      'no_such_role_xyz',
    ]);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toMatch(/no_such_role_xyz.*does not exist/);
    expect(await admin.rows(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [fresh])).toHaveLength(0);
  });
});
