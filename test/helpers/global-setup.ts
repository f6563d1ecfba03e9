// Test PostgreSQL: LEASEJOB_TEST_DATABASE_URL if set, else a throwaway embedded server; and a helm for the chart tests.
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres } from './embedded-pg.mjs';
import { provideHelm } from './test-tools.js';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // Before any worker starts: the workers inherit LEASEJOB_HELM.
  const helmNote = provideHelm();
  if (helmNote) console.log(`note: ${helmNote}; the chart, alert-rule and dashboard tests will be skipped`);
  const given = process.env.LEASEJOB_TEST_DATABASE_URL;
  if (given) {
    project.provide('databaseUrl', given);
    return async () => {};
  }
  const pg = await startEmbeddedPostgres();
  project.provide('databaseUrl', pg.url);
  return pg.stop;
}
