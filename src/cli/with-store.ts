// The store lifecycle every command but `run` and `backfill` shares: open, use, close, with the
// driver's errors as DatabaseError (exit 69).
import type { Logger } from '../log.js';
import { createLogger } from '../log.js';
import { UsageError } from '../errors.js';
import { resolveLogLevel } from './log-level.js';
import { resolveLogFormat } from './log-format.js';
import {
  chooseStore,
  openStore,
  passwordFileWarnings,
  storeError,
  type StoreChoice,
  type StoreFlags,
} from '../store/choice.js';
import type { LeaseStore } from '../store/contract.js';

export interface DbFlags extends StoreFlags {
  logLevel?: string;
  logFormat?: string;
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
  const log = createLogger(level, choice.secrets, resolveLogFormat(flags.logFormat));
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

/** A --name that matches no job is a typo until shown otherwise: exit 64, as status and check do. */
export function unknownJob(name: string, location: string): UsageError {
  return new UsageError(`no job named "${name}" has run against ${location}`);
}
