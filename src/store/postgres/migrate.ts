// Schema migrations: numbered files in sql/, applied in one transaction under an advisory
// lock, each recorded in <schema>.migrations, so pods migrating at once are safe.
import path from 'node:path';
import type pg from 'pg';
import { DatabaseError } from '../../errors.js';
import { quoteIdent } from '../../names.js';
import { listPackageDir, packageRoot, readPackageFile } from '../../package-root.js';
import { reconcileSchema, type DriftReport } from './drift.js';

const sqlDir = (): string => path.join(packageRoot(), 'sql');

export interface Migration {
  version: number;
  name: string;
  file: string;
}

export async function listMigrations(dir = sqlDir()): Promise<Migration[]> {
  const files = listPackageDir(dir)
    .filter((f) => /^\d{3,}_[a-z0-9_]+\.sql$/.test(f))
    .sort();
  return files.map((file) => ({ version: Number.parseInt(file, 10), name: file.replace(/^\d+_|\.sql$/g, ''), file }));
}

/** The newest migration this leasejob ships (what a current schema is at). */
export async function latestMigrationVersion(): Promise<number> {
  return Math.max(...(await listMigrations()).map((m) => m.version));
}

export interface MigrateResult {
  applied: Migration[];
  current: number;
  /** The schema against what the migrations make: functions mended, extra ones left. */
  drift: DriftReport;
}

export interface MigrateOptions {
  /** Roles to grant what `run`, `status`, `check` and the exporter need, and nothing more. */
  grantTo?: string[];
  /**
   * How long a statement may wait for a table lock (default 5 s). Runs queue behind a
   * migration that waits for one (a long transaction of a child's holding it): bounded, they
   * wait at most this long, and the migration fails with E_MIGRATE_LOCKED, changing nothing.
   */
  lockTimeoutMs?: number;
}

export const MIGRATE_LOCK_TIMEOUT_MS = 5_000;

export async function migrate(pool: pg.Pool, schema: string, opts: MigrateOptions = {}): Promise<MigrateResult> {
  const ident = quoteIdent(schema);
  const lockTimeoutMs = opts.lockTimeoutMs ?? MIGRATE_LOCK_TIMEOUT_MS;
  const migrations = await listMigrations();
  const latest = migrations.at(-1)?.version ?? 0;
  const client = await pool.connect();
  try {
    // Read committed whatever the role's or database's default: under repeatable read or
    // serializable the snapshot would predate the advisory lock's wait, and a migrate that
    // waited for another would not see what that one created.
    await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
    // Transaction-scoped, so it works through transaction-mode poolers and can never leak.
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`leasejob.migrate:${schema}`]);
    // After the advisory lock: another migrate is waited for as long as it takes.
    await client.query(`SELECT set_config('lock_timeout', $1, true)`, [`${Math.max(1, Math.round(lockTimeoutMs))}ms`]);
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${ident}`);
    // Functions capture this with SET search_path FROM CURRENT: pg_temp last, so a caller's
    // temporary objects can never shadow ours inside SECURITY DEFINER functions.
    await client.query(`SELECT set_config('search_path', $1, true)`, [`${ident}, pg_catalog, pg_temp`]);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${ident}.migrations (
         version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    const { rows } = await client.query<{ version: number }>(`SELECT version FROM ${ident}.migrations`);
    const done = new Set(rows.map((r) => r.version));
    const newest = Math.max(0, ...done);
    if (newest > latest) {
      throw new DatabaseError(
        `schema "${schema}" is at version ${newest}, newer than this leasejob knows (${latest}); upgrade leasejob`,
        'E_SCHEMA_TOO_NEW',
      );
    }
    const texts = migrations.map((m) => readPackageFile(path.join(sqlDir(), m.file)));
    const applied: Migration[] = [];
    for (const [i, m] of migrations.entries()) {
      if (done.has(m.version)) continue;
      await client.query(texts[i]!);
      await client.query(`INSERT INTO ${ident}.migrations (version, name) VALUES ($1, $2)`, [m.version, m.name]);
      applied.push(m);
    }
    const drift = await reconcileSchema(client, schema, texts);
    for (const role of opts.grantTo ?? []) await grantRunnerRole(client, schema, role);
    await client.query('COMMIT');
    return { applied, current: latest, drift };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    if ((err as { code?: string }).code === '55P03') {
      throw new DatabaseError(
        `migrate could not take a lock on schema "${schema}" within ${lockTimeoutMs} ms ` +
          `(${(err as Error).message}): a transaction on its tables holds it, ` +
          "most likely a child's long fenced transaction or a session left open (see pg_stat_activity). " +
          'Nothing was changed, and runs waited no longer than that. ' +
          'Try again when it ends, or give --lock-timeout more time.',
        'E_MIGRATE_LOCKED',
        { cause: err },
      );
    }
    throw err;
  } finally {
    client.release();
  }
}

/**
 * USAGE on the schema, EXECUTE on the functions (they run as their owner), SELECT on the
 * tables: enough to run, fence, read status and export metrics; no INSERT, UPDATE, DELETE,
 * TRUNCATE or DDL. Identifiers are quoted by format(%I) on the server.
 */
async function grantRunnerRole(client: pg.PoolClient, schema: string, role: string): Promise<void> {
  const { rows } = await client.query<{ sql: string }>(
    `SELECT unnest(ARRAY[
       format('GRANT USAGE ON SCHEMA %I TO %I', $1::text, $2::text),
       format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %I TO %I', $1::text, $2::text),
       format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO %I', $1::text, $2::text)]) AS sql`,
    [schema, role],
  );
  for (const r of rows) await client.query(r.sql);
}
