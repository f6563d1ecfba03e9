// The embedded store's fencing tokens after its state file is restored from a backup (issue 19,
// docs/fencing.md): the next owner never gets a token already handed out. Real CLI runs and a
// real SQLite backup put in place of the live file, as a host restore or a copied volume does.
import { copyFileSync, readFileSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { NO_DB_ENV } from '../helpers/both-stores.js';
import { fixture, runCli } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-token-floor-');

describe('the embedded store after a restored state file', () => {
  it('issues no token twice: the first owner after the restore gets one above every token issued', async () => {
    const file = path.join(tmp, 'leasejob.db');
    const record = path.join(tmp, 'children.jsonl');
    const run = async (window: string): Promise<bigint> => {
      const r = await runCli(
        [
          'run',
          '--state-file',
          file,
          '--name',
          'tf',
          '--window',
          window,
          '--',
          process.execPath,
          fixture('append-env.mjs'),
          record,
        ],
        NO_DB_ENV,
      );
      expect(r.exitCode, r.all).toBe(0);
      const last = readFileSync(record, 'utf8').trim().split('\n').at(-1)!;
      return BigInt((JSON.parse(last) as { FENCE_TOKEN: string }).FENCE_TOKEN);
    };

    expect(await run('a')).toBe(1n);
    // A consistent backup of the file as it is now (SQLite's online backup).
    const backup = path.join(tmp, 'backup.db');
    const live = new Database(file);
    await live.backup(backup);
    live.close();
    const issued = [1n, await run('b'), await run('c')];
    expect(issued).toEqual([1n, 2n, 3n]);

    // The restore: the backup put in place of the live file (a new file renamed over it, as a
    // restore tool, an extraction or a copied volume does); the old WAL goes with the old file.
    copyFileSync(backup, `${file}.restoring`);
    rmSync(`${file}-wal`, { force: true });
    rmSync(`${file}-shm`, { force: true });
    renameSync(`${file}.restoring`, file);

    const after = await run('d');
    expect(issued.every((t) => after > t)).toBe(true);
    // The floor is raised once: the next owner counts on by one.
    expect(await run('e')).toBe(after + 1n);
  });
});
