// pg_hba.conf lines for one test's own role, on the suite's server: added first (the server
// takes the first matching line), removed again after, leaving every other line as it was.
// Test files run in parallel and may edit the file at the same time: each edit holds an
// advisory lock on the server and replaces the file whole (a new file renamed over it), so
// neither another edit nor the server's reload ever reads it half written. Undefined where the
// suite cannot read and write the file (a server elsewhere): the caller skips.
import { chownSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import type { TestDb } from './db.js';

/** pg_advisory_lock key of pg_hba.conf edits ('hba' in ASCII). */
const HBA_LOCK = 0x686261;

async function edit(db: TestDb, file: string, change: (text: string) => string): Promise<void> {
  const client = await db.pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [HBA_LOCK]);
    try {
      const { mode, uid, gid } = statSync(file);
      const next = `${file}.leasejob-test-${process.pid}`;
      writeFileSync(next, change(readFileSync(file, 'utf8')), { mode: mode & 0o7777 });
      chownSync(next, uid, gid);
      renameSync(next, file);
      await client.query('SELECT pg_reload_conf()');
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [HBA_LOCK]);
    }
  } finally {
    client.release();
  }
}

export async function withHbaLines<T>(db: TestDb, lines: string[], fn: () => Promise<T>): Promise<T | undefined> {
  const file = await db.rows<{ hba_file: string }>('SHOW hba_file').then(
    (r) => r[0]!.hba_file,
    () => undefined,
  );
  if (file === undefined) return undefined;
  try {
    await edit(db, file, (text) => `${lines.join('\n')}\n${text}`);
  } catch {
    return undefined;
  }
  try {
    return await fn();
  } finally {
    const ours = new Set(lines);
    await edit(db, file, (text) =>
      text
        .split('\n')
        .filter((l) => !ours.has(l))
        .join('\n'),
    );
  }
}
