// A schema at the newest version that differs from what the migrations make (a development
// build's, a function edited by hand): migrate mends its functions, refuses tables it cannot
// mend, and never waits on a table lock for longer than --lock-timeout.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, logLines, runCli } from '../helpers/cli.js';
import { newSchemaName, testDb, type TestDb } from '../helpers/db.js';

let admin: TestDb;
beforeAll(async () => {
  admin = await testDb({ migrated: false });
});
afterAll(async () => admin.close());

const migrate = (schema: string, ...more: string[]) =>
  runCli(['migrate', '--database-url', admin.url, '--schema', schema, ...more]);
const messages = (stderr: string): string[] => logLines(stderr).map((l) => String(l.msg));
const body = async (schema: string, name: string): Promise<string> =>
  (
    await admin.rows<{ src: string }>(
      `SELECT p.prosrc AS src FROM pg_proc p WHERE p.pronamespace = $1::regnamespace AND p.proname = $2`,
      [schema, name],
    )
  )[0]!.src;

describe('migrate against a schema that drifted from its migrations', () => {
  it('a schema as the migrations make it: nothing to mend, on every migrate', async () => {
    const schema = newSchemaName('drift');
    for (let i = 0; i < 2; i++) {
      const m = await migrate(schema);
      expect(m.exitCode, m.all).toBe(0);
      expect(messages(m.stderr)).toEqual([i === 0 ? 'migrations applied' : 'schema up to date']);
    }
  });

  it('4 migrates at once on a database whose default isolation is serializable: all exit 0', async () => {
    const schema = newSchemaName('drift');
    const url = new URL(admin.url);
    url.searchParams.set('options', '-c default_transaction_isolation=serializable');
    const all = await Promise.all(
      Array.from({ length: 4 }, () => runCli(['migrate', '--database-url', url.toString(), '--schema', schema])),
    );
    for (const m of all) expect(m.exitCode, m.all).toBe(0);
    expect(all.map((m) => messages(m.stderr).at(-1)).sort()).toEqual([
      'migrations applied',
      'schema up to date',
      'schema up to date',
      'schema up to date',
    ]);
  });

  it('a function edited and one missing (run: "not migrated", migrate: "up to date", before): mended, grants kept', async () => {
    const schema = newSchemaName('drift');
    const role = `lj_drift_${randomBytes(4).toString('hex')}`;
    const password = `pw-${randomBytes(6).toString('hex')}`;
    await admin.rows(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
    const runnerUrl = new URL(admin.url);
    runnerUrl.username = role;
    runnerUrl.password = password;
    expect((await migrate(schema, '--grant-to', role)).exitCode).toBe(0);
    const original = await body(schema, 'register_job');
    await admin.rows(`CREATE OR REPLACE FUNCTION ${schema}.register_job(p_job text, p_ttl_ms integer, p_spec jsonb) RETURNS void
      LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'an older register_job'; END $$`);
    await admin.rows(`DROP FUNCTION ${schema}.assert_lease(text, bigint)`);

    const broken = await runCli([
      'run',
      '--database-url',
      runnerUrl.toString(),
      '--schema',
      schema,
      '--name',
      'j',
      '--window',
      'w1',
      '--',
      'true',
    ]);
    expect(broken.exitCode, broken.all).not.toBe(0);

    const m = await migrate(schema);
    expect(m.exitCode, m.all).toBe(0);
    const mended = logLines(m.stderr).find(
      (l) => l.msg === "schema functions differed from the migrations; replaced with this build's",
    );
    expect(mended, m.all).toMatchObject({
      level: 'warn',
      functions: expect.arrayContaining([
        'register_job(p_job text, p_ttl_ms integer, p_spec jsonb)',
        'assert_lease(p_job text, p_token bigint)',
      ]),
    });
    expect((mended!.functions as string[]).length).toBe(2);
    expect(await body(schema, 'register_job')).toBe(original);
    // The re-created function: owner's definer rights and pinned search_path, the runner's
    // grant, nobody else's.
    const [fn] = await admin.rows<{ definer: boolean; config: string[]; runner: boolean; public: boolean }>(
      `SELECT p.prosecdef AS definer, p.proconfig AS config, has_function_privilege($2, p.oid, 'EXECUTE') AS runner,
              EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0) AS public
         FROM pg_proc p WHERE p.pronamespace = $1::regnamespace AND p.proname = 'assert_lease'`,
      [schema, role],
    );
    expect(fn).toEqual({
      definer: true,
      config: [`search_path="${schema}", pg_catalog, pg_temp`],
      runner: true,
      public: false,
    });

    const ok = await runCli([
      'run',
      '--database-url',
      runnerUrl.toString(),
      '--schema',
      schema,
      '--name',
      'j',
      '--window',
      'w2',
      '--',
      'true',
    ]);
    expect(ok.exitCode, ok.all).toBe(0);
    // A child fencing its write through the re-created assert_lease, under the runner role.
    const fenced = await runCli([
      'run',
      '--database-url',
      runnerUrl.toString(),
      '--schema',
      schema,
      '--name',
      'k',
      '--window',
      'w',
      '--pass-database-url',
      '--',
      process.execPath,
      fixture('assert-once.mjs'),
    ]);
    expect(fenced.exitCode, fenced.all).toBe(0);
    expect(fenced.stdout).toContain('fenced ok');
    expect(messages((await migrate(schema)).stderr)).toEqual(['schema up to date']);
  });

  it('a table missing a column: exit 69 naming it, and nothing changed (functions included)', async () => {
    const schema = newSchemaName('drift');
    expect((await migrate(schema)).exitCode).toBe(0);
    await admin.rows(`ALTER TABLE ${schema}.windows DROP COLUMN exit_code`);
    await admin.rows(`CREATE OR REPLACE FUNCTION ${schema}.register_job(p_job text, p_ttl_ms integer, p_spec jsonb) RETURNS void
      LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'an older register_job'; END $$`);
    const m = await migrate(schema);
    expect(m.exitCode, m.all).toBe(69);
    expect(
      m.stderr
        .trim()
        .split('\n')
        .filter((l) => !l.startsWith('{')),
    ).toEqual([
      expect.stringMatching(
        new RegExp(
          `^leasejob: schema "${schema}" differs from what leasejob's migrations make, in tables it cannot mend: missing windows\\.exit_code integer\\. .*Nothing was changed\\. .*DROP SCHEMA "${schema}" CASCADE; leasejob migrate`,
        ),
      ),
    ]);
    expect(await body(schema, 'register_job')).toContain('an older register_job');
  });

  it('a table lock held by another transaction: exit 69 after --lock-timeout, nothing changed', async () => {
    const schema = newSchemaName('drift');
    expect((await migrate(schema)).exitCode).toBe(0);
    const client = await admin.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`LOCK TABLE ${schema}.migrations IN ACCESS EXCLUSIVE MODE`);
      const m = await migrate(schema, '--lock-timeout', '300ms');
      expect(m.exitCode, m.all).toBe(69);
      expect(m.stderr).toMatch(
        new RegExp(
          `^leasejob: migrate could not take a lock on schema "${schema}" within 300 ms .*Nothing was changed, and runs waited no longer than that\\. Try again when it ends, or give --lock-timeout more time\\.$`,
          'm',
        ),
      );
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
    const bad = await migrate(schema, '--lock-timeout', '0s');
    expect(bad.exitCode, bad.all).toBe(64);
    expect(bad.stderr).toMatch(/--lock-timeout/);
  });
});
