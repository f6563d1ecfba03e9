// `leasejob migrate` and `leasejob release`: short administrative commands over one connection.
import { classifyDbError, createPool, describeConnection, resolveConnection, secretsOf } from '../db.js';
import type { Logger } from '../log.js';
import { createLogger } from '../log.js';
import { migrate } from '../migrate.js';
import { validateName, validateRole, validateSchema } from '../names.js';
import { Store } from '../store.js';

export interface DbFlags {
  databaseUrl?: string;
  schema?: string;
  logLevel?: string;
  /** Connections to open at most (commands that answer concurrent requests want more than one). */
  poolSize?: number;
}

/** Open a pool, run `fn`, close it; driver errors become DatabaseError (exit 69). */
export async function withDatabase<T>(flags: DbFlags, fn: (pool: ReturnType<typeof createPool>, schema: string, log: Logger) => Promise<T>): Promise<T> {
  const schema = validateSchema(flags.schema ?? 'leasejob');
  const source = resolveConnection(flags.databaseUrl);
  const secrets = secretsOf(source);
  const log = createLogger(flags.logLevel ?? process.env.LEASEJOB_LOG_LEVEL ?? 'info', secrets);
  const pool = createPool(source, { max: flags.poolSize ?? 1 });
  try {
    return await fn(pool, schema, log);
  } catch (err) {
    throw classifyDbError(err, { schema, secrets, target: describeConnection(source) }) ?? err;
  } finally {
    await pool.end().catch(() => {});
  }
}

export async function migrateCommand(flags: DbFlags & { grantTo?: string[] }): Promise<number> {
  const grantTo = (flags.grantTo ?? []).map((r) => validateRole(r));
  return withDatabase(flags, async (pool, schema, log) => {
    const r = await migrate(pool, schema, { grantTo });
    log.info({ schema, applied: r.applied.map((m) => m.version), version: r.current }, r.applied.length ? 'migrations applied' : 'schema up to date');
    for (const role of grantTo) log.info({ schema, role }, 'runner role granted');
    return 0;
  });
}

export async function releaseCommand(flags: DbFlags & { name?: string }): Promise<number> {
  const name = validateName(flags.name);
  return withDatabase(flags, async (pool, schema, log) => {
    const r = await new Store(pool, schema).release(name, new Date());
    if (r) log.info({ job: name, owner: r.owner, generation: r.generation }, 'lease released');
    else log.info({ job: name }, 'lease not held, nothing to release');
    return 0;
  });
}
