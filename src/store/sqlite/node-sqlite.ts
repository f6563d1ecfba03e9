// The embedded store's driver inside the single executable: Node's built-in node:sqlite (Node
// 22.13+/24), behind the part of better-sqlite3's API that the store uses (prepare with
// get/all/run/pluck, exec, pragma, transaction().immediate(), open, close). The single file
// cannot carry better-sqlite3's native addon, so scripts/single-file.mjs bundles this module in
// its place; under npm the store keeps better-sqlite3, and the package keeps running on Node 20.
// Both drivers use SQLite's own busy timeout, WAL and the same files: a state file is shared
// by a single-file leasejob and an npm one on the same host.

type Params = unknown[];

/** The part of node:sqlite used here (typed here: the package's Node 20 types have no node:sqlite). */
interface StatementSync {
  get(...params: Params): unknown;
  all(...params: Params): unknown[];
  run(...params: Params): { changes: number | bigint; lastInsertRowid: number | bigint };
  setReturnArrays(on: boolean): void;
}
interface DatabaseSync {
  readonly isOpen: boolean;
  readonly isTransaction: boolean;
  prepare(sql: string): StatementSync;
  exec(sql: string): void;
  close(): void;
}
type NodeSqlite = { DatabaseSync: new (file: string, opts: { timeout: number }) => DatabaseSync };

/** SQLite's primary result codes by number, named as better-sqlite3 names its errors' `code`. */
const RESULT_NAMES = [
  'OK', 'ERROR', 'INTERNAL', 'PERM', 'ABORT', 'BUSY', 'LOCKED', 'NOMEM', 'READONLY', 'INTERRUPT', 'IOERR',
  'CORRUPT', 'NOTFOUND', 'FULL', 'CANTOPEN', 'PROTOCOL', 'EMPTY', 'SCHEMA', 'TOOBIG', 'CONSTRAINT',
  'MISMATCH', 'MISUSE', 'NOLFS', 'AUTH', 'FORMAT', 'RANGE', 'NOTADB',
]; // prettier-ignore

/**
 * node:sqlite's error (code ERR_SQLITE_ERROR, errcode the extended result code) with the
 * `SQLITE_*` code the store and the CLI classify by (cli/commands/admin.ts), as better-sqlite3's.
 */
function sqliteError(err: unknown): unknown {
  const e = err as { code?: unknown; errcode?: unknown };
  if (e === null || typeof e !== 'object' || e.code !== 'ERR_SQLITE_ERROR' || typeof e.errcode !== 'number') return err;
  const name = RESULT_NAMES[e.errcode & 0xff];
  return Object.assign(err as object, { code: name === undefined ? 'SQLITE_ERROR' : `SQLITE_${name}` });
}

function call<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw sqliteError(err);
  }
}

/**
 * A BLOB as a Buffer, as better-sqlite3 returns it: node:sqlite gives a plain Uint8Array, whose
 * String() is a list of numbers (a recorded output shown as `110,97,195,...`).
 */
const blob = (v: unknown): unknown =>
  v instanceof Uint8Array && !Buffer.isBuffer(v) ? Buffer.from(v.buffer, v.byteOffset, v.byteLength) : v;

/** Rows as plain objects (node:sqlite's have a null prototype), as better-sqlite3 returns them. */
const plain = (row: unknown): unknown =>
  row === undefined || row === null
    ? row
    : Object.fromEntries(Object.entries(row as object).map(([k, v]) => [k, blob(v)]));

class Statement {
  private plucked = false;

  constructor(private readonly stmt: StatementSync) {}

  /** The first column's value instead of the row, as better-sqlite3's pluck(). */
  pluck(on = true): this {
    this.plucked = on;
    this.stmt.setReturnArrays(on);
    return this;
  }

  get(...params: Params): unknown {
    const row = call(() => this.stmt.get(...params));
    return this.plucked ? blob((row as unknown[] | undefined)?.[0]) : plain(row);
  }

  all(...params: Params): unknown[] {
    const rows = call(() => this.stmt.all(...params));
    return rows.map((row) => (this.plucked ? blob((row as unknown[])[0]) : plain(row)));
  }

  run(...params: Params): { changes: number; lastInsertRowid: number | bigint } {
    const info = call(() => this.stmt.run(...params));
    return { changes: Number(info.changes), lastInsertRowid: info.lastInsertRowid };
  }
}

type Transaction<A extends Params, R> = ((...args: A) => R) & { immediate: (...args: A) => R };

export default class NodeSqliteDatabase {
  private readonly db: DatabaseSync;
  private depth = 0;

  constructor(file: string, opts: { timeout?: number } = {}) {
    // getBuiltinModule: a synchronous load that works in the bundle and in tsc's ES modules alike.
    const { DatabaseSync: Sync } = process.getBuiltinModule('node:sqlite') as NodeSqlite;
    this.db = call(() => new Sync(file, { timeout: opts.timeout ?? 5000 }));
  }

  get open(): boolean {
    return this.db.isOpen;
  }

  prepare(sql: string): Statement {
    return new Statement(call(() => this.db.prepare(sql)));
  }

  exec(sql: string): this {
    call(() => this.db.exec(sql));
    return this;
  }

  /** As better-sqlite3's: the rows, or with `simple` the first column of the first row. */
  pragma(source: string, opts: { simple?: boolean } = {}): unknown {
    const stmt = this.prepare(`PRAGMA ${source}`);
    return opts.simple ? stmt.pluck().get() : stmt.all();
  }

  /**
   * As better-sqlite3's: a function that runs `fn` in a transaction (BEGIN, or a savepoint when
   * one is open), committed when it returns and rolled back when it throws.
   */
  transaction<A extends Params, R>(fn: (...args: A) => R): Transaction<A, R> {
    const run =
      (begin: string) =>
      (...args: A): R => {
        const nested = this.depth > 0;
        this.exec(nested ? 'SAVEPOINT leasejob_tx' : begin);
        this.depth++;
        try {
          const result = fn(...args);
          this.exec(nested ? 'RELEASE leasejob_tx' : 'COMMIT');
          return result;
        } catch (err) {
          if (this.db.isTransaction) this.exec(nested ? 'ROLLBACK TO leasejob_tx; RELEASE leasejob_tx' : 'ROLLBACK');
          throw err;
        } finally {
          this.depth--;
        }
      };
    return Object.assign(run('BEGIN'), { immediate: run('BEGIN IMMEDIATE') });
  }

  close(): this {
    this.db.close();
    return this;
  }
}
