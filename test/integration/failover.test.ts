// Fencing across a real PostgreSQL failover: a primary and a standby streaming from it
// (Debian postgresql-15, pg_basebackup -R), leasejob and its children connected through one
// address that moves (a TCP proxy retargeted to the promoted standby, as a virtual IP, a
// Patroni HAProxy or a CloudNativePG -rw service moves). The scenario: A takes the lease
// while WAL shipping is stalled, the primary dies, the standby is promoted without A's
// acquisition, B takes the lease there. B's token must be greater than A's, and A's fenced
// writes refused on the new primary; with a synchronous standby nothing committed is lost (and
// still no lease outlives the failover: the new primary cannot tell that nothing was).
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { ROOT, fixture, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { procStat, signalIfAlive } from '../helpers/proc.mjs';
import { startProxy, type Proxy } from '../helpers/proxy.mjs';
import { dumpRestore, replicationMissing, startReplicaSet, startServer } from '../helpers/replication.mjs';
import { signalGroup, signalPid } from '../helpers/signal.mjs';

const missing = replicationMissing();
if (missing) console.info(`failover tests skipped: ${missing}`);
const WAIT_MS = 30_000;
const SCHEMA = 'leasejob';
const EPOCH = 1_000_000_000_000n;

type ReplicaSet = Awaited<ReturnType<typeof startReplicaSet>>;
interface Cluster {
  rs: ReplicaSet;
  proxy: Proxy;
  /** What leasejob and the children use: the proxy, in front of whichever server is primary. */
  url: string;
  rows<T = Record<string, unknown>>(url: string, text: string, values?: unknown[]): Promise<T[]>;
}

const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-failover-'));
const cleanups: Array<() => Promise<void>> = [];
/** Pids and process groups a test stopped: resumed and killed afterwards whatever happened. */
const strays = new Set<number>();

afterEach(async () => {
  for (const pid of strays) {
    for (const sig of ['SIGCONT', 'SIGKILL'] as const) {
      try {
        if (pid < 0) signalGroup(-pid, sig);
        else signalPid(pid, sig);
      } catch {
        // already gone
      }
    }
  }
  strays.clear();
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function query<T>(url: string, text: string, values: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => {});
  await c.connect();
  try {
    return (await c.query(text, values)).rows as T[];
  } finally {
    await c.end().catch(() => {});
  }
}

async function cluster(opts: { synchronous?: boolean; migrate?: boolean } = {}): Promise<Cluster> {
  const rs = await startReplicaSet({ synchronous: opts.synchronous ?? false });
  cleanups.push(() => rs.stop());
  const proxy = await startProxy(rs.primary.url);
  cleanups.push(() => proxy.close());
  const url = proxy.url(rs.primary.url);
  if (opts.migrate !== false) {
    const m = await runCli(['migrate', '--database-url', url, '--schema', SCHEMA]);
    expect(m.exitCode, m.all).toBe(0);
    await createUnits(url);
  }
  return { rs, proxy, url, rows: query };
}

const createUnits = (url: string): Promise<unknown> =>
  query(
    url,
    `CREATE TABLE IF NOT EXISTS ${SCHEMA}.fenced_units (
  window_key text NOT NULL, unit integer NOT NULL, generation bigint NOT NULL,
  written_at timestamptz NOT NULL DEFAULT clock_timestamp(), UNIQUE (window_key, unit))`,
  );

/** Until the standby has replayed everything the primary wrote so far. */
async function replayed(c: Cluster): Promise<void> {
  const [{ lsn }] = await query<{ lsn: string }>(c.rs.primary.url, 'SELECT pg_current_wal_lsn()::text AS lsn');
  await waitFor(
    "the standby to replay the primary's WAL",
    async () =>
      (await query<{ ok: boolean }>(c.rs.standby.url, 'SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS ok', [lsn]))[0]
        ?.ok,
    WAIT_MS,
  );
}

/** The primary dies, the standby is promoted, the address moves to it. */
async function failover(c: Cluster): Promise<void> {
  await c.rs.crashPrimary();
  await c.rs.promote();
  c.proxy.retarget(c.rs.standby.url);
}

function runArgs(
  url: string,
  job: string,
  window: string,
  writer: string[],
  extra: string[] = [],
  ttl = '3s',
): string[] {
  return [
    'run',
    '--name',
    job,
    '--window',
    window,
    '--ttl',
    ttl,
    '--kill-grace',
    '500ms',
    '--database-url',
    url,
    '--schema',
    SCHEMA,
    '--pass-database-url',
    ...extra,
    '--',
    process.execPath,
    fixture('fenced-writer.mjs'),
    '--reconnect',
    ...writer,
  ];
}

interface WriterEvent {
  event: string;
  unit?: number;
  sqlstate?: string;
  message?: string;
  generation: string;
  pid: number;
}
const readEvents = (file: string): WriterEvent[] =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as WriterEvent)
    : [];
const readMarker = (file: string): { pid: number } | undefined => {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as { pid: number };
  } catch {
    return undefined;
  }
};

/** A first run of `job` that completes and reaches the standby: the lease row exists there with generation 1. */
async function firstRun(c: Cluster, job: string): Promise<void> {
  const r = await runCli(runArgs(c.url, job, 'w0', ['--units', '1', '--delay-ms', '0']));
  expect(r.exitCode, r.all).toBe(0);
  await replayed(c);
}

const leaseOf = async (url: string, job: string) =>
  (
    await query<{ generation: string; owner: string; held: boolean }>(
      url,
      `SELECT generation, owner, expires_at > now() AS held FROM ${SCHEMA}.leases WHERE name = $1`,
      [job],
    )
  )[0];

describe.skipIf(missing !== undefined)('fencing across a PostgreSQL failover (real streaming replication)', () => {
  it("asynchronous standby, A paused across the failover: B's token is greater, A's next write is refused on the new primary, A records its loss there", async () => {
    const c = await cluster();
    const job = 'fo';
    await firstRun(c, job);

    // WAL shipping stalls: what the primary commits from now on, the standby never sees.
    c.rs.stallWal();
    const marker = path.join(dir, 'paused.marker');
    const logA = path.join(dir, 'paused.a.jsonl');
    const a = startCli(
      runArgs(c.url, job, 'w1', [
        '--units',
        '6',
        '--delay-ms',
        '50',
        '--log',
        logA,
        '--marker',
        marker,
        '--marker-after',
        '2',
        '--pause-ms',
        '60000',
      ]),
      {},
      { timeoutMs: 120_000 },
    );
    strays.add(a.pid!);
    const mark = await waitFor("A's child to write two units", () => readMarker(marker), WAIT_MS);
    const childGroup = procStat(mark.pid)!.pgrp;
    strays.add(-childGroup);
    // A paused VM, a frozen pod: runner, guard (the child's parent) and child stopped outside any
    // transaction. A guard left running would stop the child at the lease's stop point itself
    // (child-guard.test.ts); here only the fence can refuse the stale write.
    const stat = readFileSync(`/proc/${mark.pid}/stat`, 'utf8');
    const guardPid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    expect(guardPid).not.toBe(a.pid);
    signalPid(a.pid!, 'SIGSTOP');
    signalPid(guardPid, 'SIGSTOP');
    signalGroup(childGroup, 'SIGSTOP');
    await waitFor(
      'A and its child to be stopped',
      () => procStat(a.pid!)?.state === 'T' && procStat(mark.pid)?.state === 'T',
      WAIT_MS,
    );
    const tokenA = (await leaseOf(c.rs.primary.url, job))!.generation;
    expect(tokenA).toBe('2'); // as the issue found it: the second acquisition, on timeline 1

    await failover(c);
    // The new primary never saw A's acquisition (nor its units).
    expect((await leaseOf(c.rs.standby.url, job))!.generation).toBe('1');

    const logB = path.join(dir, 'paused.b.jsonl');
    const b = await runCli(
      runArgs(c.url, job, 'w1', ['--units', '6', '--delay-ms', '0', '--log', logB]),
      {},
      { timeoutMs: 60_000 },
    );
    expect(b.exitCode, b.all).toBe(0);
    const tokenB = readEvents(logB)[0]!.generation;
    expect(BigInt(tokenB)).toBeGreaterThan(BigInt(tokenA));
    expect(tokenB).toBe(String(EPOCH + 2n)); // epoch 1 (timeline 2), second acquisition

    // A's child wakes first and goes straight for its next write: the new primary refuses it.
    signalGroup(childGroup, 'SIGCONT');
    await waitFor(
      "A's child to try its next write and exit",
      () => {
        const state = procStat(mark.pid)?.state;
        return state === undefined || state === 'Z';
      },
      WAIT_MS,
    );
    signalPid(a.pid!, 'SIGCONT');
    signalPid(guardPid, 'SIGCONT');
    const ra = await a;
    strays.delete(a.pid!);
    expect(ra.exitCode, ra.all).toBe(75);

    const refused = readEvents(logA).find((e) => e.event === 'refused');
    expect(refused, JSON.stringify(readEvents(logA))).toMatchObject({ sqlstate: 'LJ001', unit: 3 });
    expect(refused!.message).toBe(
      `leasejob: fence refused for job "fo": token 2 is stale, current generation ${tokenB} ` +
        '(token of fence epoch 0, the lease is at epoch 1: the database failed over or was restored in between)',
    );
    // Every unit of w1 on the new primary is B's; nothing of A's got in after the failover.
    const units = await query<{ unit: number; generation: string }>(
      c.rs.standby.url,
      `SELECT unit, generation FROM ${SCHEMA}.fenced_units WHERE window_key = 'w1' ORDER BY unit`,
    );
    expect(units).toEqual([1, 2, 3, 4, 5, 6].map((unit) => ({ unit, generation: tokenB })));
    // A's runner found out (its renewal, its own clock, or its finish after the child's refusal)
    // and recorded the loss on the new primary, once.
    expect(
      logLines(ra.stderr).some(
        (l) => l.msg === 'lease lost' || String(l.msg).startsWith('lease was no longer held at finish'),
      ),
      ra.all,
    ).toBe(true);
    const lost = await query<{ owner: string }>(
      c.rs.standby.url,
      `SELECT owner FROM ${SCHEMA}.events WHERE job = $1 AND kind = 'lease-lost' AND generation = $2`,
      [job, tokenA],
    );
    expect(lost).toHaveLength(1);
    const windows = await query(
      c.rs.standby.url,
      `SELECT window_key, outcome, generation FROM ${SCHEMA}.windows WHERE job = $1 ORDER BY window_key`,
      [job],
    );
    expect(windows).toEqual([
      { window_key: 'w0', outcome: 'completed', generation: '1' },
      { window_key: 'w1', outcome: 'completed', generation: tokenB },
    ]);
  }, 180_000);

  it("asynchronous standby, A running through the failover: its renewal on the new primary finds the loss and stops the child; B's token is greater", async () => {
    const c = await cluster();
    const job = 'fo';
    await firstRun(c, job);
    c.rs.stallWal();
    const logA = path.join(dir, 'running.a.jsonl');
    // The child writes a unit, then works a long while without writing: the runner's next
    // renewal, not the child's next write, is what meets the new primary first.
    const a = startCli(
      runArgs(c.url, job, 'w1', ['--units', '3', '--delay-ms', '60000', '--log', logA], [], '20s'),
      {},
      { timeoutMs: 120_000 },
    );
    await waitFor("A's child to write a unit", () => readEvents(logA).some((e) => e.event === 'written'), WAIT_MS);
    const tokenA = readEvents(logA)[0]!.generation;
    expect(tokenA).toBe('2');

    await failover(c);
    const ra = await a;
    expect(ra.exitCode, ra.all).toBe(75);
    const log = logLines(ra.stderr);
    expect(
      log.find((l) => l.msg === 'lease lost'),
      ra.all,
    ).toMatchObject({ reason: 'lease-lost', detail: 'renewal found the lease taken, expired or released' });
    expect(
      log.some((l) => l.msg === 'stopping child'),
      ra.all,
    ).toBe(true);
    // Nothing A's child wrote reached the new primary, and the loss is recorded there, once.
    expect(
      await query(c.rs.standby.url, `SELECT unit FROM ${SCHEMA}.fenced_units WHERE generation = $1`, [tokenA]),
    ).toEqual([]);
    expect(
      await query(
        c.rs.standby.url,
        `SELECT owner FROM ${SCHEMA}.events WHERE job = $1 AND kind = 'lease-lost' AND generation = $2`,
        [job, tokenA],
      ),
    ).toHaveLength(1);
    expect(readEvents(logA).map((e) => e.event)).toEqual(['written', 'stopped']);

    const logB = path.join(dir, 'running.b.jsonl');
    const b = await runCli(runArgs(c.url, job, 'w1', ['--units', '3', '--delay-ms', '0', '--log', logB]));
    expect(b.exitCode, b.all).toBe(0);
    const tokenB = readEvents(logB)[0]!.generation;
    expect(BigInt(tokenB)).toBeGreaterThan(BigInt(tokenA));
  }, 180_000);

  it("synchronous standby: nothing A committed is lost; A's lease does not outlive the failover (its renewal is refused), and the next run completes the window in the next epoch", async () => {
    const c = await cluster({ synchronous: true });
    const job = 'fo';
    await firstRun(c, job);
    const logA = path.join(dir, 'sync.a.jsonl');
    const a = startCli(
      runArgs(c.url, job, 'w1', ['--units', '12', '--delay-ms', '250', '--log', logA], [], '10s'),
      {},
      { timeoutMs: 120_000 },
    );
    await waitFor(
      "A's child to write two units",
      () => readEvents(logA).filter((e) => e.event === 'written').length >= 2,
      WAIT_MS,
    );
    const tokenA = readEvents(logA)[0]!.generation;
    expect(tokenA).toBe('2');
    // Committed means on the standby too: nothing to stall, nothing to lose.
    await failover(c);
    expect((await leaseOf(c.rs.standby.url, job))!.generation).toBe(tokenA); // the acquisition is there

    // The new primary cannot tell what A wrote after the standby's last replicated point, so
    // the lease of the earlier history is neither renewed nor accepted by the fence: A's runner
    // stops its child, or the child's next write is refused first.
    const ra = await a;
    expect(ra.exitCode, ra.all).toBe(75);
    const refusedA = readEvents(logA).filter((e) => e.event === 'refused');
    const runnerLost = logLines(ra.stderr).find((l) => l.msg === 'lease lost');
    expect(runnerLost !== undefined || refusedA.length > 0, ra.all).toBe(true);
    if (runnerLost) expect(runnerLost).toMatchObject({ reason: 'lease-lost' });
    for (const e of refusedA)
      expect(e.message).toContain(
        'token 2 was issued before the database failed over or was restored (fence epoch 0): the lease does not outlive it',
      );
    // Every unit A's child was told was committed is on the new primary.
    const writtenA = [
      ...new Set(
        readEvents(logA)
          .filter((e) => e.event === 'written')
          .map((e) => e.unit),
      ),
    ];
    const units = await query<{ unit: number; generation: string }>(
      c.rs.standby.url,
      `SELECT unit, generation FROM ${SCHEMA}.fenced_units WHERE window_key = 'w1' ORDER BY unit`,
    );
    expect(units).toEqual(writtenA.map((unit) => ({ unit, generation: tokenA })));
    for (const e of readEvents(logA).filter((x) => x.event === 'refused')) expect(e.sqlstate).toBe('LJ001');

    // The next run redoes the window in the next epoch, writing only what is missing.
    const logC = path.join(dir, 'sync.c.jsonl');
    const r = await runCli(
      runArgs(
        c.url,
        job,
        'w1',
        ['--units', '12', '--delay-ms', '0', '--log', logC],
        ['--on-busy', 'wait', '--wait-timeout', '30s'],
      ),
    );
    expect(r.exitCode, r.all).toBe(0);
    const tokenC = readEvents(logC)[0]!.generation;
    expect(tokenC).toBe(String(EPOCH + 3n));
    const all = await query<{ unit: number; generation: string }>(
      c.rs.standby.url,
      `SELECT unit, generation FROM ${SCHEMA}.fenced_units WHERE window_key = 'w1' ORDER BY unit`,
    );
    expect(all.map((u) => u.unit)).toEqual(Array.from({ length: 12 }, (_, k) => k + 1));
    expect(all.every((u) => u.generation === tokenA || u.generation === tokenC)).toBe(true);
    expect(
      await query(c.rs.standby.url, `SELECT generation FROM ${SCHEMA}.events WHERE job = $1 AND kind = 'lease-lost'`, [
        job,
      ]),
    ).toEqual([{ generation: tokenA }]);
  }, 180_000);

  it('pg_dump and restore into a new cluster after a failover: tokens go on increasing there', async () => {
    const c = await cluster();
    const job = 'dump';
    await firstRun(c, job);
    await failover(c);
    const logB = path.join(dir, 'dump.b.jsonl');
    expect((await runCli(runArgs(c.url, job, 'w1', ['--units', '1', '--delay-ms', '0', '--log', logB]))).exitCode).toBe(
      0,
    );
    const tokenB = BigInt(readEvents(logB)[0]!.generation);
    expect(tokenB).toBe(EPOCH + 2n);

    // A new cluster: its own system identifier, back on timeline 1.
    const target = await startServer();
    cleanups.push(() => target.stop());
    await dumpRestore(c.url, target.url, SCHEMA);
    const logC = path.join(dir, 'dump.c.jsonl');
    const rc = await runCli(runArgs(target.url, job, 'w2', ['--units', '1', '--delay-ms', '0', '--log', logC]));
    expect(rc.exitCode, rc.all).toBe(0);
    const tokenC = BigInt(readEvents(logC)[0]!.generation);
    expect(tokenC).toBe(2n * EPOCH + 3n);
    // A token of the old cluster is refused in the new one.
    const err = await query(target.url, `SELECT ${SCHEMA}.assert_lease($1, $2)`, [job, String(tokenB)]).then(
      () => undefined,
      (e: pg.DatabaseError) => e,
    );
    expect(err?.code).toBe('LJ001');
  }, 180_000);

  it('upgrade from the schema before 011 with a live lease: its token is still accepted; after a failover new tokens are greater than every old one', async () => {
    const c = await cluster({ migrate: false });
    // Today's schema: migrations 001-009 applied as `migrate` applies them.
    const client = new pg.Client({ connectionString: c.url });
    client.on('error', () => {});
    await client.connect();
    await client.query('BEGIN');
    await client.query(`CREATE SCHEMA ${SCHEMA}`);
    await client.query(`SELECT set_config('search_path', '${SCHEMA}, pg_catalog, pg_temp', true)`);
    await client.query(
      `CREATE TABLE ${SCHEMA}.migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    for (const v of [1, 2, 3, 4, 5, 6, 7, 8, 9]) {
      const file = readdirSync(path.join(ROOT, 'sql')).find((f) => f.startsWith(`00${v}_`))!;
      await client.query(await readFile(path.join(ROOT, 'sql', file), 'utf8'));
      await client.query(`INSERT INTO ${SCHEMA}.migrations (version, name) VALUES ($1, $2)`, [
        v,
        file.replace(/^\d+_|\.sql$/g, ''),
      ]);
    }
    await client.query('COMMIT');
    await client.end();
    await createUnits(c.url);
    const job = 'up';
    await firstRun(c, job); // generation 1 under the old schema

    // A holds the lease (generation 2, the old schema's token) and pauses between units.
    const marker = path.join(dir, 'upgrade.marker');
    const logA = path.join(dir, 'upgrade.a.jsonl');
    const a = startCli(
      runArgs(c.url, job, 'w1', [
        '--units',
        '4',
        '--delay-ms',
        '0',
        '--log',
        logA,
        '--marker',
        marker,
        '--marker-after',
        '2',
        '--pause-ms',
        '60000',
      ]),
      {},
      { timeoutMs: 120_000 },
    );
    const mark = await waitFor("A's child to write two units", () => readMarker(marker), WAIT_MS);
    expect(readEvents(logA)[0]!.generation).toBe('2');
    const m = await runCli(['migrate', '--database-url', c.url, '--schema', SCHEMA]);
    expect(m.exitCode, m.all).toBe(0);
    expect(
      (await query<{ v: number }>(c.url, `SELECT max(version) AS v FROM ${SCHEMA}.migrations`))[0]!.v,
    ).toBeGreaterThanOrEqual(11);
    // The live lease goes on: renewed, and its token accepted by the new assert_lease. On a busy
    // machine the migration may outlast the child's pause (--pause-ms): it has then resumed by
    // itself and may have exited already, which proves the same.
    signalIfAlive(mark.pid, 'SIGCONT');
    const ra = await a;
    expect(ra.exitCode, ra.all).toBe(0);
    expect(
      readEvents(logA)
        .filter((e) => e.event === 'written')
        .map((e) => e.unit),
    ).toEqual([1, 2, 3, 4]);

    // A new acquisition on the same timeline goes on counting (epoch 0: the tokens of before).
    await replayed(c);
    c.rs.stallWal();
    const logC = path.join(dir, 'upgrade.c.jsonl');
    const rc = await runCli(runArgs(c.url, job, 'w2', ['--units', '1', '--delay-ms', '0', '--log', logC]));
    expect(rc.exitCode, rc.all).toBe(0);
    expect(readEvents(logC)[0]!.generation).toBe('3'); // lost with the primary: WAL stalled
    await failover(c);
    const logD = path.join(dir, 'upgrade.d.jsonl');
    const rd = await runCli(runArgs(c.url, job, 'w2', ['--units', '1', '--delay-ms', '0', '--log', logD]));
    expect(rd.exitCode, rd.all).toBe(0);
    const tokenD = BigInt(readEvents(logD)[0]!.generation);
    expect(tokenD).toBe(EPOCH + 3n);
    expect(tokenD).toBeGreaterThan(3n);
    // The lost branch's token 3, never issued on this history, is refused here.
    const err = await query(c.url, `SELECT ${SCHEMA}.assert_lease($1, 3)`, [job]).then(
      () => undefined,
      (e: pg.DatabaseError) => e,
    );
    expect(err?.code).toBe('LJ001');
  }, 180_000);
});
