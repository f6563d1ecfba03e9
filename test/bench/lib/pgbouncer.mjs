// PgBouncer (transaction pooling) in front of the bench's server, for the overhead rows "through
// pgbouncer": a run then connects to a warm pooled server connection instead of having the
// server start a backend. Clients authenticate with a cleartext password, as they do to the
// bench's server directly (the floor fixture speaks no other method). Installed with apt-get
// when missing and root; otherwise those rows are skipped with a note.
import { spawnSync } from 'node:child_process';
import { pgbouncerBinary, startPgbouncer } from '../../helpers/pgbouncer.mjs';
import { aptInstall } from './apt.mjs';

/** @returns {Promise<{ url: string, version: string, installed: boolean, stop: () => Promise<void> } | { note: string }>} */
export async function startBenchPgbouncer(target, log = console.error) {
  let binary = pgbouncerBinary();
  let installed = false;
  if (!binary) {
    const r = aptInstall(['pgbouncer'], log);
    if (!r.ok) return { note: `pgbouncer: ${r.note}` };
    binary = pgbouncerBinary();
    installed = true;
    if (!binary) return { note: 'pgbouncer still not found after apt-get install' };
  }
  try {
    const b = await startPgbouncer({ binary, target, authType: 'plain', poolSize: 10, serverCredentials: true });
    const version = spawnSync(binary, ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0].trim();
    return { url: b.url, version, installed, stop: b.stop };
  } catch (err) {
    return { note: `pgbouncer did not start: ${err.message.split('\n')[0]}` };
  }
}
