// The embedded store's fencing tokens after its state file is restored from a backup (issues 19
// and 44, docs/fencing.md): the next owner never gets a token already handed out. Real CLI runs
// and a real SQLite backup put in place of the live file, as a host restore or a copied volume
// does, or copied over the live file's own bytes (`cp backup.db state.db`: same inode, same boot).
import { copyFileSync, existsSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { NO_DB_ENV } from '../helpers/both-stores.js';
import { fixture, runCli } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-token-floor-');

/** `leasejob run` of one window on the state file; the child's FENCE_TOKEN. */
function runner(file: string, record: string) {
  return async (window: string): Promise<bigint> => {
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
}

/** A consistent backup of the file as it is now (SQLite's online backup). */
async function backupOf(file: string, backup: string): Promise<void> {
  const live = new Database(file);
  await live.backup(backup);
  live.close();
}

const ascending = (l: bigint[]): boolean => l.every((t, i) => i === 0 || t > l[i - 1]!);

describe('the embedded store after a restored state file', () => {
  it('restored in place (cp over the live file: same inode, same boot): the next token is above every token issued', async () => {
    const dir = tempDir('leasejob-token-floor-in-place-');
    const file = path.join(dir, 'leasejob.db');
    const run = runner(file, path.join(dir, 'children.jsonl'));
    const first = await run('a');
    const backup = path.join(dir, 'backup.db');
    await backupOf(file, backup);
    const issued = [first, await run('b'), await run('c')];
    expect(ascending(issued), issued.join(' ')).toBe(true);

    // `cp backup.db leasejob.db`: the backup's bytes written over the live file, which keeps its
    // inode. The run above closed the store, so its WAL was checkpointed and removed.
    const inode = statSync(file).ino;
    expect(existsSync(`${file}-wal`)).toBe(false);
    copyFileSync(backup, file);
    expect(statSync(file).ino).toBe(inode);

    const after = await run('d');
    expect(
      issued.every((t) => after > t),
      `${after} after ${issued.join(' ')}`,
    ).toBe(true);
    expect(await run('e')).toBeGreaterThan(after);
  });

  it('issues no token twice: the first owner after the restore gets one above every token issued', async () => {
    const file = path.join(tmp, 'leasejob.db');
    const record = path.join(tmp, 'children.jsonl');
    const run = runner(file, record);

    const first = await run('a');
    const backup = path.join(tmp, 'backup.db');
    await backupOf(file, backup);
    const issued = [first, await run('b'), await run('c')];
    expect(ascending(issued), issued.join(' ')).toBe(true);

    // The restore: the backup put in place of the live file (a new file renamed over it, as a
    // restore tool, an extraction or a copied volume does); the old WAL goes with the old file.
    copyFileSync(backup, `${file}.restoring`);
    rmSync(`${file}-wal`, { force: true });
    rmSync(`${file}-shm`, { force: true });
    renameSync(`${file}.restoring`, file);

    const after = await run('d');
    expect(issued.every((t) => after > t)).toBe(true);
    expect(await run('e')).toBeGreaterThan(after);
  });
});
