// The embedded store's schema: numbered files in sql/sqlite/, applied in order by PRAGMA
// user_version inside one immediate transaction, then the indexes kept on every open.
import path from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import { listPackageDir, packageRoot, readPackageFile } from '../../package-root.js';

/** Created on every open when missing, at any version (sql/sqlite/indexes.sql says why). */
const EVERY_OPEN = 'indexes.sql';

export const sqliteSchemaDir = (): string => path.join(packageRoot(), 'sql', 'sqlite');

export interface SqliteSchemaStep {
  version: number;
  file: string;
}

/** The numbered schema files of `dir`, oldest first. */
export function listSqliteSchema(dir = sqliteSchemaDir()): SqliteSchemaStep[] {
  let files: string[];
  try {
    files = listPackageDir(dir);
  } catch (err) {
    throw new Error(
      `leasejob: the embedded store's schema files are missing (${dir}: ${(err as NodeJS.ErrnoException).code ?? err}); reinstall leasejob`,
      { cause: err },
    );
  }
  return files
    .filter((f) => /^\d{3,}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((file) => ({ version: Number.parseInt(file, 10), file }));
}

/**
 * Brings the state file's schema to this leasejob's: each file newer than its user_version, each
 * followed by setting user_version to that file's number, then the every-open indexes; all in
 * one immediate transaction, so a crash or a concurrent open never leaves it half upgraded.
 * A file from a newer leasejob is refused (SQLITE_SCHEMA_TOO_NEW), changing nothing.
 */
export function migrateSqlite(db: BetterSqlite3.Database, dir = sqliteSchemaDir()): void {
  const steps = listSqliteSchema(dir);
  const latest = steps.at(-1)?.version ?? 0;
  db.transaction(() => {
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > latest)
      throw Object.assign(
        new Error(
          `state file schema is at version ${version}, newer than this leasejob knows (${latest}); upgrade leasejob`,
        ),
        { code: 'SQLITE_SCHEMA_TOO_NEW' },
      );
    for (const step of steps) {
      if (step.version <= version) continue;
      db.exec(readPackageFile(path.join(dir, step.file)));
      db.pragma(`user_version = ${step.version}`);
    }
    db.exec(readPackageFile(path.join(dir, EVERY_OPEN)));
  }).immediate();
}
