// Per-file test schema on the real test PostgreSQL, migrated with the real migrator.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { migrate } from '../../src/store/postgres/migrate.js';

export interface TestDb {
  url: string;
  schema: string;
  pool: pg.Pool;
  /** Query helper: rows of a parameterized statement. */
  rows<T = Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]>;
  close(): Promise<void>;
}

export function newSchemaName(prefix = 't'): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

export async function testDb(opts: { migrated?: boolean } = {}): Promise<TestDb> {
  const url = inject('databaseUrl');
  const schema = newSchemaName();
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  if (opts.migrated !== false) await migrate(pool, schema);
  return {
    url,
    schema,
    pool,
    rows: async (text, values) => (await pool.query(text, values)).rows,
    // Schemas are kept (not dropped) so a failed test can be inspected; they are tiny.
    close: () => pool.end(),
  };
}
