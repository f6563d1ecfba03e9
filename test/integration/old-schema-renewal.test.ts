// A lease taken on a schema from before a migration keeps renewing until `migrate` brings the
// schema up to date: the renewal must not call a function a later migration added.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, fixture, logLines, runCli } from '../helpers/cli.js';
import { newSchemaName, testDb, type TestDb } from '../helpers/db.js';

let db: TestDb;
beforeAll(async () => {
  db = await testDb({ migrated: false });
});
afterAll(async () => db.close());

/** A schema with migrations 001 to `upTo` applied, as `migrate` of that release applied them. */
async function schemaAt(upTo: number): Promise<string> {
  const schema = newSchemaName('old');
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`CREATE SCHEMA ${schema}`);
    await client.query(`SELECT set_config('search_path', $1, true)`, [`${schema}, pg_catalog, pg_temp`]);
    await client.query(
      `CREATE TABLE ${schema}.migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    const files = readdirSync(path.join(ROOT, 'sql')).filter(
      (f) => /^\d{3}_.*\.sql$/.test(f) && Number.parseInt(f, 10) <= upTo,
    );
    for (const file of files.sort()) {
      await client.query(readFileSync(path.join(ROOT, 'sql', file), 'utf8'));
      await client.query(`INSERT INTO ${schema}.migrations (version, name) VALUES ($1, $2)`, [
        Number.parseInt(file, 10),
        file.replace(/^\d+_|\.sql$/g, ''),
      ]);
    }
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  return schema;
}

describe('a run on a schema that predates the newest migrations', () => {
  it('schema at 009 (before 025 added replace requests): a child that outlives several TTLs keeps its lease', async () => {
    const schema = await schemaAt(9);
    // TTL 3 s, renewed every second; the child lives 7 s. Before the fix every renewal failed
    // (replace_requested() does not exist before 025) and the run lost its lease: exit 75.
    const r = await runCli(
      [
        'run',
        '--database-url',
        db.url,
        '--schema',
        schema,
        '--name',
        'old-schema',
        '--window',
        'w1',
        '--ttl',
        '3s',
        '--log-level',
        'debug',
        '--',
        process.execPath,
        fixture('sleep-then.mjs'),
        '7000',
        '0',
      ],
      {},
      { timeoutMs: 60_000 },
    );
    expect(r.exitCode, r.all).toBe(0);
    const msgs = logLines(r.stderr).map((l) => String(l.msg));
    expect(msgs).toContain('lease renewed');
    expect(msgs).not.toContain('lease lost');
  }, 90_000);
});
