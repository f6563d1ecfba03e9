// Which store a command uses: PostgreSQL when a database is configured, else the embedded SQLite
// file for one host; refused inside Kubernetes or with --require-shared.
import { statSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { DEFAULTS } from '../defaults.js';
import {
  describeConnection,
  passwordFileWarnings,
  resolveConnection,
  secretsOf,
  type ConnectionSource,
} from './postgres/connection.js';
import { UsageError } from '../errors.js';
import { classifyDbError } from './postgres/db-errors.js';
import { classifySqliteDriverError, classifySqliteError } from './sqlite/errors.js';
import { validateSchema } from '../names.js';
import type { LeaseStore } from './contract.js';
import type { MigrateOptions, MigrateResult } from './postgres/migrate.js';
import type { PgStore } from './postgres/store.js';

export { passwordFileWarnings } from './postgres/connection.js';

export interface StoreFlags {
  databaseUrl?: string;
  /** --database-url-file: the URL read from this file. */
  databaseUrlFile?: string;
  schema?: string;
  stateFile?: string;
  requireShared?: boolean;
  /** Connections to open at most (commands that answer concurrent requests want more than one). */
  poolSize?: number;
  /** How long a read waits for its answer (PostgreSQL); the store's default when unset. */
  readTimeoutMs?: number;
  /**
   * The embedded store must exist already: not created for a command that only reads or
   * administers it (a mistyped --state-file, another user's home would show an empty, healthy
   * store). `run` and `migrate` create it.
   */
  existingOnly?: boolean;
}

export type StoreChoice =
  | { kind: 'postgresql'; source: ConnectionSource; schema: string; secrets: string[]; location: string }
  | { kind: 'sqlite'; file: string; secrets: string[]; location: string };

/**
 * The libpq variables that say "this host connects to PostgreSQL": any of them chooses it, as
 * libpq (psql) would connect with them, to the local server if PGHOST is not among them. Not
 * the TLS or application ones (PGSSLMODE, PGAPPNAME, ...), which say how, not whether.
 */
const PG_CONNECTION_VARIABLES = ['PGHOST', 'PGPORT', 'PGDATABASE', 'PGUSER', 'PGPASSWORD', 'PGSERVICE'] as const;
/** Often exported for psql's convenience alone: an explicit state file wins over these. */
const PG_WEAK_VARIABLES = new Set(['PGPORT', 'PGUSER', 'PGPASSWORD']);

function postgresConfigured(flags: StoreFlags, env: NodeJS.ProcessEnv): boolean {
  if (flags.databaseUrl !== undefined || flags.databaseUrlFile !== undefined) return true;
  if (env.LEASEJOB_DATABASE_URL || env.LEASEJOB_DATABASE_URL_FILE || env.DATABASE_URL) return true;
  const stateFileGiven = flags.stateFile !== undefined || !!env.LEASEJOB_STATE_FILE;
  return PG_CONNECTION_VARIABLES.some((v) => !!env[v] && !(stateFileGiven && PG_WEAK_VARIABLES.has(v)));
}

/** A safety switch fails closed: a value that is neither on nor off is a usage error, not off. */
function requireSharedFromEnv(env: NodeJS.ProcessEnv): boolean {
  const value = (env.LEASEJOB_REQUIRE_SHARED ?? '').trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(value)) return true;
  if (['', '0', 'false', 'no', 'off'].includes(value)) return false;
  throw new UsageError(
    `Expected LEASEJOB_REQUIRE_SHARED to be 1, true, yes or on (or 0, false, no, off), got ${JSON.stringify(env.LEASEJOB_REQUIRE_SHARED)}.`,
  );
}

export function defaultStateFile(env: NodeJS.ProcessEnv = process.env): string {
  const base =
    env.XDG_STATE_HOME && path.isAbsolute(env.XDG_STATE_HOME)
      ? env.XDG_STATE_HOME
      : path.join(homedir(), '.local', 'state');
  return path.join(base, 'leasejob', 'leasejob.db');
}

export function chooseStore(flags: StoreFlags, env: NodeJS.ProcessEnv = process.env): StoreChoice {
  const schema = validateSchema(flags.schema ?? DEFAULTS.schema);
  // Read whichever store is chosen: a value that is neither on nor off is a mistake either way.
  const fromEnv = requireSharedFromEnv(env);
  const requireShared = flags.requireShared === true || fromEnv;
  if (postgresConfigured(flags, env)) {
    if (flags.stateFile !== undefined) {
      // Name what configured it: with a state file given, PGPORT, PGUSER and PGPASSWORD do not.
      const by = [
        ...(flags.databaseUrl !== undefined ? ['--database-url'] : []),
        ...(flags.databaseUrlFile !== undefined ? ['--database-url-file'] : []),
        ...(['LEASEJOB_DATABASE_URL', 'LEASEJOB_DATABASE_URL_FILE', 'DATABASE_URL'] as const).filter((v) => !!env[v]),
        ...PG_CONNECTION_VARIABLES.filter((v) => !!env[v] && !PG_WEAK_VARIABLES.has(v)),
      ];
      throw new UsageError(
        `\`--state-file\` is for the embedded one-host store, but a PostgreSQL database is configured ` +
          `(${by.join(', ')}); use one or the other.`,
      );
    }
    const source = resolveConnection(flags.databaseUrl, env, flags.databaseUrlFile);
    // libpq would take host, port, database and user from pg_service.conf (over PGHOST and the
    // rest); node-postgres does not read that file, so it would quietly connect elsewhere.
    if (source.from === 'PG environment' && env.PGSERVICE) {
      throw new UsageError(
        `PGSERVICE is set (${JSON.stringify(env.PGSERVICE)}), but leasejob does not read ` +
          `pg_service.conf; give the connection as LEASEJOB_DATABASE_URL (or --database-url, or PGHOST, ` +
          `PGPORT, PGDATABASE and PGUSER) and unset PGSERVICE.`,
      );
    }
    return {
      kind: 'postgresql',
      source,
      schema,
      secrets: secretsOf(source, env),
      location: `${describeConnection(source)} schema ${schema}`,
    };
  }
  const why = env.KUBERNETES_SERVICE_HOST
    ? 'inside Kubernetes (KUBERNETES_SERVICE_HOST is set) each pod would get its own state file and every pod would run the job'
    : requireShared
      ? '--require-shared (or LEASEJOB_REQUIRE_SHARED) was given'
      : undefined;
  if (why) {
    // Inside a leasejob child (LEASEJOB_OWNER set): its runner set LEASEJOB_REQUIRE_SHARED.
    const nested =
      env.LEASEJOB_OWNER && !env.KUBERNETES_SERVICE_HOST
        ? ' (this runs inside a leasejob child on PostgreSQL, which sets LEASEJOB_REQUIRE_SHARED; the ' +
          'outer `run --pass-database-url` gives the child its DATABASE_URL)'
        : '';
    throw new UsageError(
      `no shared database configured and ${why}; set LEASEJOB_DATABASE_URL (or --database-url) to a ` +
        `PostgreSQL that every runner reaches${nested}.`,
    );
  }
  if (flags.stateFile !== undefined && flags.stateFile.trim() === '')
    throw new UsageError('Expected `--state-file` to be a file path, got an empty string.');
  // A schema would separate nothing here: jobs meant to be kept apart would share one file.
  if (flags.schema !== undefined) {
    throw new UsageError(
      '`--schema` names a PostgreSQL schema, but no PostgreSQL is configured and the embedded store ' +
        'has none; leave it out, give each group of jobs its own --state-file, or set ' +
        'LEASEJOB_DATABASE_URL.',
    );
  }
  // An empty variable is unset, as a chart's `value: ""` means.
  const given =
    flags.stateFile !== undefined ? '--state-file' : env.LEASEJOB_STATE_FILE ? 'LEASEJOB_STATE_FILE' : undefined;
  const file = path.resolve(flags.stateFile ?? (env.LEASEJOB_STATE_FILE || undefined) ?? defaultStateFile(env));
  // Only the default location's directories are created: a path given by hand whose directory
  // is missing is far likelier a typo than a wish, and would quietly start a second, empty store.
  if (given !== undefined && directoryMissing(path.dirname(file))) {
    throw new UsageError(
      `the directory of the state file ${file} (${given}) does not exist; create it (mkdir -p ${path.dirname(file)}) or correct the path.`,
    );
  }
  return { kind: 'sqlite', file, secrets: [], location: file };
}

/** True only when nothing is there (a directory we may not search is the store's to report). */
function directoryMissing(dir: string): boolean {
  try {
    statSync(dir);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

export async function openStore(
  choice: StoreChoice,
  flags: StoreFlags = {},
  opts: { connectEarly?: boolean } = {},
): Promise<LeaseStore> {
  if (choice.kind === 'postgresql') {
    const { PgStore, createPool } = await import('./postgres/store.js');
    const store = new PgStore(
      createPool(choice.source, { max: flags.poolSize }),
      choice.schema,
      choice.location,
      flags.readTimeoutMs,
    );
    if (opts.connectEarly) store.connectEarly();
    return store;
  }
  // Loaded only when used: the PostgreSQL path never pays for the native module. A module built
  // for another Node.js fails here: said in one line with what to do, not as an internal error.
  const { SqliteStore } = await import('./sqlite/store.js').catch((err: unknown) => {
    throw classifySqliteDriverError(err) ?? err;
  });
  return SqliteStore.open(choice.file, { create: !flags.existingOnly });
}

/**
 * `run` only: open the PostgreSQL store and start connecting while the rest of the command
 * loads (what a connection costs is mostly the server's: a backend, the password check).
 * Undefined for the embedded store or flags that do not choose a store; the command then
 * chooses and opens it itself and reports what was wrong. Nothing is written by connecting.
 */
export function openStoreEarly(flags: StoreFlags): { choice: StoreChoice; store: Promise<LeaseStore> } | undefined {
  let choice: StoreChoice;
  try {
    choice = chooseStore(flags);
  } catch {
    return undefined;
  }
  if (choice.kind !== 'postgresql') return undefined;
  // The password file may be read before the command has made its logger: its warning waits.
  passwordFileWarnings.hold();
  const store = openStore(choice, flags, { connectEarly: true });
  store.catch(() => {}); // reported when the command awaits it
  return { choice, store };
}

/** Driver errors of either store as DatabaseError (exit 69), redacted; undefined when not ours. */
export function storeError(err: unknown, choice: StoreChoice, permissionHint?: string): Error | undefined {
  if (choice.kind === 'postgresql')
    return classifyDbError(err, {
      schema: choice.schema,
      secrets: choice.secrets,
      target: choice.location,
      permissionHint,
    });
  return classifySqliteError(err, choice.file);
}

/** `leasejob migrate` on a PostgreSQL store: its schema migrated, its functions mended (loaded only when used). */
export async function migratePostgres(store: LeaseStore, schema: string, opts: MigrateOptions): Promise<MigrateResult> {
  const { migrate } = await import('./postgres/migrate.js');
  return migrate((store as PgStore).pool, schema, opts);
}

/** The newest schema version this build's migrations make (loaded only when used). */
export async function latestSchemaVersion(): Promise<number> {
  const { latestMigrationVersion } = await import('./postgres/migrate.js');
  return latestMigrationVersion();
}
