// The embedded store's schema as numbered files (sql/sqlite/), applied by PRAGMA user_version:
// a fresh file gets exactly what the old built-in schema made, a state file made by the old code
// path opens and runs as before, a newer step upgrades a file in one transaction (or not at all),
// and a file from a newer leasejob is refused, changing nothing.
import { createHash } from 'node:crypto';
import { cpSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/log.js';
import { runWithLease } from '../../src/lease/runner.js';
import { listSqliteSchema, migrateSqlite, sqliteSchemaDir } from '../../src/store/sqlite/schema.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { ROOT, runCli } from '../helpers/cli.js';
import { tempDirs } from '../helpers/temp.js';

const newDir = tempDirs('leasejob-sqlite-files-');
const OLD_SCHEMA = readFileSync(path.join(ROOT, 'test', 'fixtures', 'sqlite-v1-schema.sql'), 'utf8');

/** A state file as leasejob made it before its schema moved to sql/sqlite/. */
function oldCodePathFile(file: string): void {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.transaction(() => {
    db.exec(OLD_SCHEMA);
    db.pragma('user_version = 1');
  }).immediate();
  db.close();
}

/** Every table, index and column of a state file, as SQLite records them. */
function schemaOf(file: string): { objects: string[]; version: number } {
  const db = new Database(file, { readonly: true });
  try {
    const objects = (
      db
        .prepare("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")
        .all() as Array<{ type: string; name: string; sql: string }>
    ).map((o) => `${o.type} ${o.name}: ${o.sql.replace(/\s+/g, ' ')}`);
    return { objects, version: db.pragma('user_version', { simple: true }) as number };
  } finally {
    db.close();
  }
}

const runOnce = async (store: SqliteStore, key: string) =>
  (
    await runWithLease(
      store,
      { name: 'j', ttlMs: 3_000, killGraceMs: 500, window: { key } },
      async () => 0,
      silentLogger,
    )
  ).status;

describe('sql/sqlite: the embedded store schema as numbered files', () => {
  it('numbered from 001 without gaps, beside the every-open indexes; 001 is what version 1 always was', () => {
    const steps = listSqliteSchema();
    expect(steps.map((s) => s.version)).toEqual(steps.map((_, i) => i + 1));
    expect(readdirSync(sqliteSchemaDir()).sort()).toEqual([...steps.map((s) => s.file), 'indexes.sql'].sort());
    // Frozen, like the PostgreSQL migrations: a file on a host applied each as it was.
    const frozen: Array<[string, string]> = [
      ['001_init.sql', '6b399fccbe9f8e3bdb8b06c3f8d5c4692d633f71543c52dcb4c6677d8d055a6d'],
      ['002_versions_pause.sql', 'a6c7d3ba6e1cf8a1010b7b169e9bca38db1dacf1caa3267d53e9ee3a28d0b7f9'],
      ['003_retention.sql', 'df1cf7b3de37b0af0ca18e815efecc5d5ab319b058e8a74fa582704e56c3a4b1'],
      ['004_output_tail.sql', '733ea6f18fc7d200ca2a22a1bae0cb8638a14dc8cc9e249250b9e7460ff5f076'],
      ['005_alert_lookback.sql', '53a7733fdb3a50402a7edd6fcf73f004f05d9b3c3c704d532a2df6fc76b55700'],
      ['006_expect_duration.sql', 'bb7201e2d56bc59a0e90596f4de2f726defc1456ed1b273f1d3fc5c864a4b204'],
      ['007_attempt_budget.sql', '9cffdd76be2b493fa9827bfa392d0d342929e22d7e5f741465ef036154317693'],
      ['008_on_busy_replace.sql', '8dcc0995a88610516e4fabccdebf4a874e07253505ec91c797fa2fbd8caf98dc'],
      ['009_claimed_as.sql', 'b64a762db2ddbcef5114b29d45ea675d2150b5d2b2aaac33950cafb668397119'],
      ['010_schedule_since.sql', 'baa679f478b7cd0c235d4a82ba223c2ab81d46f4fd2630eedf99a4974dafb2f2'],
      ['011_token_floor.sql', 'a9500e637a93164263e1fa96d43d7869e27d6503533841835b95507b7f513067'],
    ];
    for (const [file, hash] of frozen) {
      const sha = createHash('sha256')
        .update(readFileSync(path.join(sqliteSchemaDir(), file), 'utf8').replace(/\r\n/g, '\n'))
        .digest('hex');
      expect(sha, `sql/sqlite/${file} was edited; put the change in the next numbered file`).toBe(hash);
    }
  });

  it('a new state file gets exactly the schema the built-in string made, upgraded by the numbered files after 001', () => {
    const dir = newDir();
    const store = SqliteStore.open(path.join(dir, 'new.db'));
    void store.close();
    oldCodePathFile(path.join(dir, 'old.db'));
    void SqliteStore.open(path.join(dir, 'old.db')).close();
    expect(schemaOf(path.join(dir, 'new.db'))).toEqual(schemaOf(path.join(dir, 'old.db')));
    expect(schemaOf(path.join(dir, 'new.db')).version).toBe(listSqliteSchema().at(-1)!.version);
  });

  it('a version-1 file made by the old code path opens, keeps its windows, runs, and is upgraded once', async () => {
    const file = path.join(newDir(), 'v1.db');
    oldCodePathFile(file);
    const store = SqliteStore.open(file);
    const before = schemaOf(file);
    expect(before.version).toBe(listSqliteSchema().at(-1)!.version);
    expect(await runOnce(store, 'a')).toBe('completed');
    await store.close();
    const again = SqliteStore.open(file);
    expect(await runOnce(again, 'a')).toBe('skipped'); // its window completed before: not run again
    expect(await runOnce(again, 'b')).toBe('completed');
    expect((await again.readJobRows('j')).rows[0]).toMatchObject({ name: 'j', lastWindow: 'b' });
    await again.close();
    const fresh = path.join(newDir(), 'fresh.db');
    void SqliteStore.open(fresh).close();
    expect(schemaOf(file)).toEqual(schemaOf(fresh));
  });

  it('a newer numbered file upgrades a file on a host in order, in one transaction; a failing step changes nothing', async () => {
    const dir = newDir();
    const schemaDir = path.join(dir, 'sqlite');
    cpSync(sqliteSchemaDir(), schemaDir, { recursive: true });
    const file = path.join(dir, 'host.db');
    const store = SqliteStore.open(file);
    expect(await runOnce(store, 'a')).toBe('completed');
    await store.close();

    // The two files after the newest shipped one.
    const at = listSqliteSchema().at(-1)!.version;
    const num = (n: number): string => String(n).padStart(3, '0');
    writeFileSync(path.join(schemaDir, `${num(at + 1)}_note.sql`), 'ALTER TABLE jobs ADD COLUMN note TEXT;\n');
    writeFileSync(
      path.join(schemaDir, `${num(at + 2)}_broken.sql`),
      "UPDATE jobs SET note = 'set by 003';\nCREATE TABLE jobs (x INTEGER);\n",
    );
    const db = new Database(file);
    expect(() => migrateSqlite(db, schemaDir)).toThrow(/already exists/);
    expect(db.pragma('user_version', { simple: true })).toBe(at);
    expect((db.prepare('SELECT * FROM jobs').all() as Array<Record<string, unknown>>)[0]).not.toHaveProperty('note');

    writeFileSync(path.join(schemaDir, `${num(at + 2)}_broken.sql`), "UPDATE jobs SET note = 'set by 003';\n");
    migrateSqlite(db, schemaDir);
    expect(db.pragma('user_version', { simple: true })).toBe(at + 2);
    expect(db.prepare('SELECT name, note FROM jobs').all()).toEqual([{ name: 'j', note: 'set by 003' }]);
    migrateSqlite(db, schemaDir); // at the newest: nothing applied again
    expect(db.prepare('SELECT count(*) AS n FROM windows').get()).toEqual({ n: 1 });
    db.close();
  });

  it('a file from a newer leasejob is refused as before: exit 69, its version named, nothing changed', async () => {
    const dir = newDir();
    const file = path.join(dir, 'newer.db');
    const store = SqliteStore.open(file);
    await store.close();
    const latest = listSqliteSchema().at(-1)!.version;
    const raw = new Database(file);
    raw.pragma(`user_version = ${latest + 1}`);
    raw.close();
    const before = schemaOf(file);
    expect(() => SqliteStore.open(file)).toThrow(expect.objectContaining({ code: 'SQLITE_SCHEMA_TOO_NEW' }));

    const r = await runCli(['run', '--state-file', file, '--name', 'j', '--window', 'w', '--', 'true']);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toContain(
      `state file schema is at version ${latest + 1}, newer than this leasejob knows (${latest}); upgrade leasejob`,
    );
    expect(schemaOf(file)).toEqual(before);
  });
});
