// sql/functions/<name>.sql holds the one current definition of each SQL function: what a fresh
// `migrate` creates must be exactly what those files create, function by function.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/store/postgres/migrate.js';
import { functionsOf, type FunctionRow } from '../../src/store/postgres/drift.js';
import { newSchemaName, testDb, type TestDb } from '../helpers/db.js';
import { ROOT } from '../helpers/wait.js';

const dir = path.join(ROOT, 'sql', 'functions');
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.sql'))
  .sort();
const nameOf = (file: string): string => file.replace(/\.sql$/, '');

let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => db.close());

const byName = (rows: FunctionRow[]): Map<string, FunctionRow[]> => {
  const out = new Map<string, FunctionRow[]>();
  for (const r of rows)
    out.set(
      r.name,
      [...(out.get(r.name) ?? []), r].sort((a, b) => a.args.localeCompare(b.args)),
    );
  return out;
};
const shape = (rows: FunctionRow[] | undefined): string[] =>
  (rows ?? []).map((r) => `${r.name}(${r.args}) ${r.fingerprint}`);

describe('sql/functions', () => {
  it('each file creates the function it is named for, with CREATE OR REPLACE', () => {
    expect(files.length).toBeGreaterThan(0);
    for (const file of files) {
      const text = readFileSync(path.join(dir, file), 'utf8');
      const created = [...text.matchAll(/^\s*CREATE\s+(OR\s+REPLACE\s+)?FUNCTION\s+([a-z_][a-z0-9_]*)\s*\(/gim)];
      expect(
        created.map((m) => m[2]),
        `${file} must create exactly the function ${nameOf(file)}`,
      ).toEqual([nameOf(file)]);
      expect(
        created[0]![1],
        `${file}: CREATE OR REPLACE, so the file can be applied over an existing schema`,
      ).toBeDefined();
    }
  });

  it('every function a fresh migrate creates is exactly as its file defines it', async () => {
    // A: what the migrations make. B: the same, then every file applied over it, as a
    // migration copying them would. Any difference names the function whose file and
    // migrations disagree.
    const fresh = db.schema;
    const applied = newSchemaName('fn');
    await migrate(db.pool, applied);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      // As the migrator does: the functions pin this search_path (SET search_path FROM CURRENT).
      await client.query(`SELECT set_config('search_path', $1, true)`, [`"${applied}", pg_catalog, pg_temp`]);
      for (const file of files) await client.query(readFileSync(path.join(dir, file), 'utf8'));
      const want = byName(await functionsOf(client, fresh));
      const got = byName(await functionsOf(client, applied));
      await client.query('ROLLBACK');

      const missing = [...want.keys()].filter((n) => !files.includes(`${n}.sql`));
      expect(missing, 'functions the migrations create with no file in sql/functions/').toEqual([]);
      for (const name of new Set([...want.keys(), ...got.keys()])) {
        expect(
          shape(got.get(name)),
          `sql/functions/${name}.sql differs from what the migrations create for ${name}(): ` +
            'edit the file and generate the next migration from it (npm run sql:migration -- <name>), see docs/development.md',
        ).toEqual(shape(want.get(name)));
      }
    } finally {
      await client.query('ROLLBACK').catch(() => {});
      client.release();
    }
  });
});
