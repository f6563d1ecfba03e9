// `leasejob migrate`: the PostgreSQL schema migrated and its functions mended; the embedded store migrates itself.
import { MAX_TIMER_MS, parseDuration } from '../../schedule/duration.js';
import { UsageError } from '../../errors.js';
import { validateRole } from '../../names.js';
import { chooseStore, migratePostgres } from '../../store/choice.js';
import { withStore, type DbFlags } from '../with-store.js';

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
      const r = await migratePostgres(store, choice.schema, { grantTo, lockTimeoutMs });
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
        "migrate creates and replaces the schema's tables and functions, so run it as the schema's " +
        'owner (or a role that may create schemas in this database), and give runner roles --grant-to',
    },
  );
}
