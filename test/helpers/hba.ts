// pg_hba.conf lines for one test's own role, on the suite's server: added first (the server
// takes the first matching line), removed again after, leaving every other line as it was,
// since other test files may add their own meanwhile. Undefined where the suite cannot read
// and write the file (a server elsewhere): the caller skips.
import { readFileSync, writeFileSync } from 'node:fs';
import type { TestDb } from './db.js';

export async function withHbaLines<T>(db: TestDb, lines: string[], fn: () => Promise<T>): Promise<T | undefined> {
  const file = await db.rows<{ hba_file: string }>('SHOW hba_file').then((r) => r[0]!.hba_file, () => undefined);
  if (file === undefined) return undefined;
  try {
    writeFileSync(file, `${lines.join('\n')}\n${readFileSync(file, 'utf8')}`);
  } catch {
    return undefined;
  }
  try {
    await db.rows('SELECT pg_reload_conf()');
    return await fn();
  } finally {
    const ours = new Set(lines);
    writeFileSync(file, readFileSync(file, 'utf8').split('\n').filter((l) => !ours.has(l)).join('\n'));
    await db.rows('SELECT pg_reload_conf()');
  }
}
