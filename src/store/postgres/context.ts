// What every concern of the PostgreSQL store shares: its connection as a sender of statements
// (PgStore.query: bounded, and sent again when the server rolled it back), the schema, what the
// schema was found to lack, and the SQL fragments several concerns read.
import type pg from 'pg';

/** A server notice (pg's NoticeMessage, of which only these fields are read). */
export interface Notice {
  message?: string | undefined;
  detail?: string | undefined;
}

/** What this store found its schema to lack (a `migrate` pending): each set once, then known. */
export interface SchemaFound {
  /** Set once the schema is found to predate 035: acquire() and renew(), without the two clocks. */
  beforeTwoClocks: boolean;
  /** Set once the schema is found to predate 025: renewals then carry no replace request. */
  noReplaceRequests: boolean;
  /** Whether windows.claimed_as exists (026): asked until it is found, then known. */
  claimedAsColumn: boolean;
}

/** The store as each concern's functions take it. */
export interface Pg {
  /** The schema, quoted. */
  readonly s: string;
  /** The bound on reads and administrative statements; 0 for none (migrations). */
  readonly readTimeoutMs: number;
  readonly found: SchemaFound;
  /** One statement, its connection and answer waited for at most `timeoutMs` (default readTimeoutMs) together (PgStore.query). */
  query(
    text: string,
    values: unknown[] | ((leftMs: number) => unknown[]),
    timeoutMs?: number,
    notices?: Notice[],
  ): Promise<pg.QueryResult>;
}

/**
 * A lease `l` held by a database session that is gone: its recorded backend is no longer there, or
 * is another session by its start time (as acquire() judges a crashed holder: sql/006). A
 * session the role may not see still shows its pid, with a null start: taken as alive.
 */
export const HOLDER_GONE_SQL = (l: string): string =>
  `(${l}.expires_at > now() AND ${l}.backend_pid IS NOT NULL AND NOT EXISTS (
     SELECT 1 FROM pg_stat_get_activity(${l}.backend_pid) a
      WHERE a.pid = ${l}.backend_pid AND (a.backend_start IS NULL OR a.backend_start = ${l}.backend_start)))`;

/**
 * An instant as float8 milliseconds since the epoch, truncated to the millisecond as a
 * JavaScript Date holds it: truncated first, so float rounding cannot land a millisecond early.
 */
export const epochMs = (expr: string): string =>
  `round(date_part('epoch', date_trunc('milliseconds', ${expr})) * 1000)`;

/** A function of the schema missing (42883): the schema predates the migration that added it. */
export function isUndefinedFunction(err: unknown, name: string): boolean {
  const e = err as { code?: string; message?: string };
  return e.code === '42883' && (e.message ?? '').includes(name);
}
