// Tokens that survive lost history, on real servers (Debian postgresql-15): a crash restart in
// place with synchronous_commit = off, and a physical backup (a disk snapshot's stand-in)
// started in place of the lost primary. Either way the server keeps its system identifier and
// timeline, so the fence epoch cannot tell; the acquisition must be durable before the child
// starts, and a token issued after the loss must be above every token issued before it.
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { replicationMissing, startLocalServer } from '../helpers/replication.mjs';

const missing = replicationMissing();
if (missing) console.info(`lost-history tests skipped: ${missing}`);
const SCHEMA = 'leasejob';
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function query<T = Record<string, unknown>>(url: string, text: string, values: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => {});
  await c.connect();
  try {
    return (await c.query(text, values)).rows as T[];
  } finally {
    await c.end().catch(() => {});
  }
}

/** acquire() as a runner calls it: the generation, or the outcome when none was issued. */
async function acquire(url: string, job: string, owner: string): Promise<bigint | string> {
  const [r] = await query<{ outcome: string; generation: string | null }>(
    url,
    `SELECT outcome, generation FROM ${SCHEMA}.acquire($1, $2, 60000, 20000, NULL, NULL, false, NULL, now(), '{}'::jsonb, 1000)`,
    [job, owner],
  );
  return r!.generation === null ? r!.outcome : BigInt(r!.generation);
}

/** Ends the current lease as an expiry would (its holder stopped renewing), so the next acquire takes over. */
const expire = (url: string, job: string) =>
  query(url, `UPDATE ${SCHEMA}.leases SET expires_at = now() - interval '1 second' WHERE name = $1`, [job]);

async function server(conf: string[] = []) {
  const s = await startLocalServer({ conf });
  cleanups.push(s.stop);
  const m = await runCli(['migrate', '--database-url', s.url, '--schema', SCHEMA]);
  expect(m.exitCode, m.all).toBe(0);
  return s;
}

describe.skipIf(missing !== undefined)('tokens after lost history (real servers)', () => {
  it('synchronous_commit = off and a crash restart in place: the acquisition survives, and no token is issued twice', async () => {
    // The WAL writer waits 10 s: a commit not flushed by itself sits in memory until then.
    const s = await server(['synchronous_commit = off', 'wal_writer_delay = 10000ms', 'wal_writer_flush_after = 0']);
    expect(await acquire(s.url, 'crash', 'host-0:1:a')).toBeTypeOf('bigint');
    await expire(s.url, 'crash');
    await query(s.url, 'CHECKPOINT');
    const a = await acquire(s.url, 'crash', 'host-a:1:a');
    await s.crash();
    await s.start();
    const [row] = await query<{ owner: string; generation: string }>(
      s.url,
      `SELECT owner, generation FROM ${SCHEMA}.leases WHERE name = 'crash'`,
    );
    // A was told it holds the lease: that is still so after the crash.
    expect(row).toEqual({ owner: 'host-a:1:a', generation: String(a) });
    await expire(s.url, 'crash');
    const b = await acquire(s.url, 'crash', 'host-b:1:b');
    expect(typeof b === 'bigint' && typeof a === 'bigint' && b > a, `A ${a}, B ${b}`).toBe(true);
  });

  it('a physical backup started in place of the lost primary issues tokens above every token issued before it', async () => {
    const s = await server();
    expect(await acquire(s.url, 'snap', 'host-0:1:a')).toBeTypeOf('bigint');
    const backup = await s.backup();
    await expire(s.url, 'snap');
    const a = await acquire(s.url, 'snap', 'host-a:1:a');
    // The primary is lost; its backup is started in its place: same system identifier, timeline 1.
    await s.startFrom(backup);
    const [fence] = await query<{ timeline: string }>(s.url, `SELECT timeline FROM ${SCHEMA}.fence_epoch`);
    expect(fence!.timeline).toBe('1');
    await expire(s.url, 'snap');
    const b = await acquire(s.url, 'snap', 'host-b:1:b');
    expect(typeof b === 'bigint' && typeof a === 'bigint' && b > a, `A ${a}, B ${b}`).toBe(true);
    // A's token is not current on the restored server: its renewal and its fenced writes are refused.
    const renewed = await query(s.url, `SELECT * FROM ${SCHEMA}.renew('snap', 'host-a:1:a', $1, 60000, 1000)`, [
      String(a),
    ]);
    expect(renewed).toEqual([]);
  });
});
