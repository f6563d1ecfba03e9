// The embedded store's state file across leasejob versions: a file from before the
// last-completed index gets it when opened, keeps its windows and its version (so an older
// leasejob still opens it), and status finds a job's last completed window by index.
import path from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/log.js';
import { runWithLease } from '../../src/lease/runner.js';
import { JOB_ROWS_SQL, SqliteStore } from '../../src/store/sqlite/store.js';
import { listSqliteSchema } from '../../src/store/sqlite/schema.js';
import { tempDir } from '../helpers/temp.js';

const dir = tempDir('leasejob-sqlite-schema-');

describe('embedded store schema', () => {
  it('adds the last-completed index to a state file without it when opened, keeping its windows and version', async () => {
    const file = path.join(dir, 'v1.db');
    const store = SqliteStore.open(file);
    for (const key of ['a', 'b']) {
      const r = await runWithLease(
        store,
        { name: 'j', ttlMs: 3_000, killGraceMs: 500, window: { key } },
        async () => 0,
        silentLogger,
      );
      expect(r.status).toBe('completed');
    }
    await store.close();
    // Make it the file an older leasejob left: no such index.
    const raw = new Database(file);
    raw.exec('DROP INDEX windows_last_completed');
    raw.close();

    const upgraded = SqliteStore.open(file);
    const { rows } = await upgraded.readJobRows('j');
    expect(rows[0]).toMatchObject({ name: 'j', lastWindow: 'b' });
    await upgraded.close();

    const check = new Database(file, { readonly: true });
    try {
      expect(check.pragma('user_version', { simple: true })).toBe(listSqliteSchema().at(-1)!.version);
      expect(
        check.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'windows_last_completed'").get(),
      ).toBeDefined();
      // The store's own query (status, check, the exporter): the last completed window of each
      // job comes from the index, without a sort per job.
      const steps = check.prepare(`EXPLAIN QUERY PLAN ${JOB_ROWS_SQL}`).all({ name: null, since: 0 }) as Array<{
        id: number;
        parent: number;
        detail: string;
      }>;
      const last = steps.find(
        (r) =>
          /SCALAR SUBQUERY/.test(r.detail) &&
          steps.some((c) => c.parent === r.id && /^SEARCH \w+ USING INDEX windows_last_completed/.test(c.detail)),
      );
      expect(last, steps.map((r) => `${r.id}<${r.parent} ${r.detail}`).join('\n')).toBeDefined();
      expect(
        steps
          .filter((c) => c.parent === last!.id)
          .map((c) => c.detail)
          .join('\n'),
      ).not.toMatch(/TEMP B-TREE/);
    } finally {
      check.close();
    }
  });
});
