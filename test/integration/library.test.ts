// The library API: runWithLease from the package entry point, for in-process schedulers.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, runWithLease, silentLogger, Store, resolveConnection } from '../../dist/index.js';
import { testDb, type TestDb } from '../helpers/db.js';

let db: TestDb;
let store: InstanceType<typeof Store>;
let pool: ReturnType<typeof createPool>;
beforeAll(async () => {
  db = await testDb();
  pool = createPool(resolveConnection(db.url));
  store = new Store(pool, db.schema);
});
afterAll(async () => {
  await pool.end();
  await db.close();
});

describe('runWithLease', () => {
  it('runs a task once per window and hands it the fencing token and idempotency key', async () => {
    const seen: string[] = [];
    const opts = { name: 'lib-job', ttlMs: 3_000, killGraceMs: 500, window: { key: '2026-11-30' } };
    const first = await runWithLease(
      store,
      opts,
      async (ctx) => {
        seen.push(`${ctx.fenceToken}|${ctx.idempotencyKey}|${ctx.attempt}`);
        return 42;
      },
      silentLogger,
    );
    expect(first).toMatchObject({ status: 'completed', value: 42, generation: '1', attempt: 1 });
    const second = await runWithLease(store, opts, async () => 0, silentLogger);
    expect(second).toMatchObject({ status: 'skipped', reason: 'done' });
    expect(seen).toEqual(['1|lib-job:2026-11-30|1']);
  });

  it('aborts the task when the lease is taken, and does not complete the window', async () => {
    const result = await runWithLease(
      store,
      { name: 'lib-lost', ttlMs: 1_500, killGraceMs: 200, window: { key: 'w' } },
      async (ctx) => {
        await db.rows(
          `UPDATE ${db.schema}.leases SET owner = 'other:1:x', generation = generation + 1, expires_at = now() + interval '1 hour' WHERE name = 'lib-lost'`,
        );
        await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
        throw ctx.signal.reason;
      },
      silentLogger,
    );
    expect(result.status).toBe('failed');
    if (result.status === 'failed') expect(result.aborted?.kind).toBe('lease-lost');
    const w = await db.rows<{ completed: boolean }>(
      `SELECT completed_at IS NOT NULL AS completed FROM ${db.schema}.windows WHERE job = 'lib-lost'`,
    );
    expect(w[0]?.completed).toBe(false);
  });
});
