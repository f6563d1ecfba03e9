// Both stores for a test file: a PostgreSQL schema of its own (made before its tests, closed
// after) and an embedded state file, each as the flags a command takes to use it, and the
// environment that keeps any other database out. Call at the file's top level.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import type { CliEnv } from './cli.js';
import { testDb, type TestDb } from './db.js';
import { tempDir } from './temp.js';

export const NO_DB_ENV: CliEnv = {
  DATABASE_URL: undefined,
  LEASEJOB_DATABASE_URL: undefined,
  PGHOST: undefined,
  JOB_NAME: undefined,
};

export function bothStores(prefix: string): { db: () => TestDb; stores: Array<[string, () => string[]]> } {
  const state = path.join(tempDir(prefix), 'state');
  mkdirSync(state);
  let db: TestDb;
  beforeAll(async () => {
    db = await testDb();
  });
  afterAll(async () => {
    await db.close();
  });
  return {
    db: () => db,
    stores: [
      ['PostgreSQL', () => ['--database-url', db.url, '--schema', db.schema]],
      ['the embedded store', () => ['--state-file', path.join(state, 'leasejob.db')]],
    ],
  };
}
