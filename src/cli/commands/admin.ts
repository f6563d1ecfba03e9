// `leasejob migrate`, and the store lifecycle every command shares (the operator writes are in operator.ts).
import { passwordFileWarnings } from '../../store/postgres/connection.js';
import { classifyDbError } from '../../store/postgres/db-errors.js';
import { MAX_TIMER_MS, parseDuration } from '../../schedule/duration.js';
import { DatabaseError, UsageError } from '../../errors.js';
import type { Logger } from '../../log.js';
import { createLogger } from '../../log.js';
import { resolveLogLevel } from '../log-level.js';
import { validateRole } from '../../names.js';
import { chooseStore, openStore, type StoreChoice, type StoreFlags } from '../../store/choice.js';
import type { LeaseStore } from '../../store/contract.js';
import type { PgStore } from '../../store/postgres/store.js';

export interface DbFlags extends StoreFlags {
  logLevel?: string;
}

/**
 * Open the store, run `fn`, close it; driver errors become DatabaseError (exit 69). An embedded
 * store that does not exist is an error (exit 69), not created, unless `createStore` (migrate).
 */
export async function withStore<T>(
  flags: DbFlags,
  fn: (store: LeaseStore, log: Logger, choice: StoreChoice) => Promise<T>,
  opts: { permissionHint?: string; createStore?: boolean } = {},
): Promise<T> {
  const level = resolveLogLevel(flags.logLevel);
  const choice = chooseStore(flags);
  const log = createLogger(level, choice.secrets);
  passwordFileWarnings.sendTo((message) => log.warn(message));
  let store: LeaseStore | undefined;
  try {
    store = await openStore(choice, { ...flags, existingOnly: !opts.createStore });
    return await fn(store, log, choice);
  } catch (err) {
    throw storeError(err, choice, opts.permissionHint) ?? err;
  } finally {
    await store?.close();
  }
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

export function classifySqliteError(err: unknown, file: string): Error | undefined {
  const code = String((err as { code?: unknown }).code ?? '');
  if (!code.startsWith('SQLITE_')) return undefined;
  // Every command writes (WAL: its shared-memory file next to the state file), reads included.
  const hint =
    code.startsWith('SQLITE_READONLY') || code.startsWith('SQLITE_CANTOPEN')
      ? '; every command, status and history included, needs to write the state file and its directory: run it as the user that runs the jobs'
      : '';
  return new DatabaseError(`state file ${file}: ${(err as Error).message} (${code})${hint}`, 'E_STATE_FILE', {
    cause: err,
  });
}

export async function migrateCommand(flags: DbFlags & { grantTo?: string[]; lockTimeout?: string }): Promise<number> {
  const grantTo = (flags.grantTo ?? []).map((r) => validateRole(r));
  const lockTimeoutMs =
    flags.lockTimeout !== undefined ? parseDuration(flags.lockTimeout, '--lock-timeout') : undefined;
  if (lockTimeoutMs !== undefined && !(lockTimeoutMs >= 1 && lockTimeoutMs <= MAX_TIMER_MS)) {
    throw new UsageError(
      `Expected \`--lock-timeout\` to be a duration from 1ms to 24d, got ${JSON.stringify(flags.lockTimeout)}.`,
    );
  }
  if (grantTo.length && chooseStore(flags).kind === 'sqlite')
    throw new UsageError('`--grant-to` needs a PostgreSQL database; the embedded store has no roles.');
  return withStore(
    flags,
    async (store, log, choice) => {
      if (choice.kind === 'sqlite') {
        // The embedded store migrates itself when opened.
        log.info({ store: 'sqlite', location: choice.file }, 'schema up to date');
        return 0;
      }
      const { migrate } = await import('../../store/postgres/migrate.js');
      const r = await migrate((store as PgStore).pool, choice.schema, { grantTo, lockTimeoutMs });
      if (r.drift.skipped !== undefined)
        log.warn(
          { schema: choice.schema, reason: r.drift.skipped },
          'schema not compared with the migrations (this role may not create the reference schema)',
        );
      if (r.drift.repaired.length)
        log.warn(
          { schema: choice.schema, functions: r.drift.repaired },
          "schema functions differed from the migrations; replaced with this build's",
        );
      if (r.drift.extra.length)
        log.info(
          { schema: choice.schema, functions: r.drift.extra },
          'schema has functions the migrations do not make; left in place',
        );
      log.info(
        { schema: choice.schema, applied: r.applied.map((m) => m.version), version: r.current },
        r.applied.length ? 'migrations applied' : 'schema up to date',
      );
      for (const role of grantTo) log.info({ schema: choice.schema, role }, 'runner role granted');
      return 0;
    },
    {
      createStore: true,
      permissionHint:
        "migrate creates and replaces the schema's tables and functions, so run it as the schema's owner (or a role that may create schemas in this database), and give runner roles --grant-to",
    },
  );
}

/** A --name that matches no job is a typo until shown otherwise: exit 64, as status and check do. */
export function unknownJob(name: string, location: string): UsageError {
  return new UsageError(`no job named "${name}" has run against ${location}`);
}
