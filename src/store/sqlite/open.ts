// Opening the state file: the checks that say what is wrong with a path, the driver, and its pragmas.
import { mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import Database from 'better-sqlite3';
import { DatabaseError, UsageError } from '../../errors.js';
import { classifySqliteDriverError } from './errors.js';
import { checkStateFile } from './state-file-checks.js';

/**
 * The driver's handle on `file`. better-sqlite3 loads its native module here, not on import: one
 * built for another Node.js fails here, said in one line with what to do (exit 69).
 */
function openDriver(file: string): BetterSqlite3.Database {
  try {
    return new Database(file, { timeout: BUSY_TIMEOUT_MS });
  } catch (err) {
    throw classifySqliteDriverError(err) ?? err;
  }
}

/** What is at `file`: `hidden` when a directory on the way cannot be searched by this user. */
function fileKind(file: string): 'file' | 'directory' | 'other' | 'missing' | 'hidden' {
  try {
    const st = statSync(file);
    return st.isFile() ? 'file' : st.isDirectory() ? 'directory' : 'other';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EACCES' ? 'hidden' : 'missing';
  }
}

// Waits for another process's transaction this long before failing: transactions here are a
// few statements, so anything longer means a stuck process, reported as a store error.
const BUSY_TIMEOUT_MS = 5_000;

/** The state file opened for the store (created unless `create` is false), checked and with its pragmas set. */
export function openStateFile(file: string, opts: { create?: boolean } = {}): BetterSqlite3.Database {
  const dir = path.dirname(file);
  const kind = fileKind(file);
  if (kind === 'directory') {
    throw new UsageError(
      `the state file ${file} is a directory; give a file path (--state-file or LEASEJOB_STATE_FILE), ` +
        `e.g. ${path.join(file, 'leasejob.db')}.`,
    );
  }
  if (kind === 'other') {
    throw new UsageError(
      `the state file ${file} is not a regular file (a device, a FIFO or a socket); give the path of ` +
        `a file (--state-file or LEASEJOB_STATE_FILE).`,
    );
  }
  if (kind === 'hidden') {
    throw new DatabaseError(
      `state file ${file}: this user cannot look into its directory (EACCES); every command, status ` +
        `and history included, needs to write the state file and its directory: run it as the user that ` +
        `runs the jobs`,
      'E_STATE_FILE',
    );
  }
  if (opts.create === false && kind === 'missing') {
    throw new DatabaseError(
      `no embedded store at ${file}: no job has run with it. If the jobs run as another user, or with ` +
        `another --state-file, LEASEJOB_STATE_FILE or XDG_STATE_HOME, give theirs (and run as their ` +
        `user); \`leasejob migrate\` creates an empty one`,
      'E_STATE_FILE',
    );
  }
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    // A system account's home (/nonexistent), a read-only root filesystem: said in one line.
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new DatabaseError(
      `state file ${file}: cannot create its directory ${dir} (${code}); give a writable --state-file ` +
        `or LEASEJOB_STATE_FILE, or set LEASEJOB_DATABASE_URL`,
      'E_STATE_FILE',
      { cause: err },
    );
  }
  checkStateFile(file, opts.create !== false);
  const db = openDriver(file);
  // A new file gives the pages `leasejob prune` frees back in steps (retention.ts).
  // Only takes effect before the first table exists; an older file keeps its mode until a
  // VACUUM (`prune --vacuum`).
  db.pragma('auto_vacuum = INCREMENTAL');
  // WAL: readers never block the writer; NORMAL is durable across process crashes, which is
  // what one host's ledger needs (a power loss may drop the last transaction).
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  return db;
}
