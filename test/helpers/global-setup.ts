// Test PostgreSQL: LEASEJOB_TEST_DATABASE_URL if set, else a throwaway embedded server.
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres } from './embedded-pg.mjs';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const given = process.env.LEASEJOB_TEST_DATABASE_URL;
  if (given) {
    project.provide('databaseUrl', given);
    return async () => {};
  }
  const pg = await startEmbeddedPostgres();
  project.provide('databaseUrl', pg.url);
  return pg.stop;
}
