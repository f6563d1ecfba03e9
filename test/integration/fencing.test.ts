// Fencing against the real PostgreSQL: assert_lease() errors and locking, the design note's
// paused-owner timeline end to end through the built CLI, and the examples/ children.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { execa } from 'execa';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, fixture, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { procStat as procState, signalIfAlive } from '../helpers/proc.mjs';
import { signalGroup, signalPid } from '../helpers/signal.mjs';

const FENCE_REFUSED = 'LJ001';
const NULL_NOT_ALLOWED = '22004';
// Generous: a busy 2-core machine, with several runners and PostgreSQL sharing it.
const WAIT_LIMIT_MS = 20_000;

let db: TestDb;
let s: string;
let dir: string;
const clients: pg.Client[] = [];
/** Process groups and pids a test stopped: resumed and killed afterwards whatever happened. */
const strays = new Set<number>();

beforeAll(async () => {
  db = await testDb();
  s = `"${db.schema}"`;
  dir = mkdtempSync(path.join(tmpdir(), 'leasejob-fencing-'));
  await db.rows(`CREATE TABLE ${s}.fenced_units (
    window_key text NOT NULL, unit integer NOT NULL, generation bigint NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp(), UNIQUE (window_key, unit))`);
});

afterEach(async () => {
  for (const c of clients.splice(0)) await c.end().catch(() => {});
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
});

afterAll(async () => {
  await db?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

let seq = 0;
const jobName = (what: string): string => `${what}-${process.pid}-${++seq}`;

async function connect(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  clients.push(c);
  return c;
}

/** Take the lease directly (no window) and return its generation. */
async function acquire(
  job: string,
  owner: string,
  ttlMs: number,
  via: pg.Client | pg.Pool = db.pool,
  lockTimeoutMs = 500,
): Promise<{ outcome: string; generation: string | null }> {
  const { rows } = await via.query(
    `SELECT outcome, generation FROM ${s}.acquire($1, $2, $3, $4, NULL, NULL, false, NULL, now(), NULL, $5)`,
    [job, owner, ttlMs, Math.floor(ttlMs / 3), lockTimeoutMs],
  );
  return rows[0];
}

async function acquired(job: string, owner = 'test-host:1:aaaa', ttlMs = 60_000): Promise<string> {
  const r = await acquire(job, owner, ttlMs);
  expect(r.outcome).toBe('acquired');
  return r.generation as string;
}

/** The error assert_lease raises (undefined when it passes), in a transaction of its own. */
async function fenceError(job: string | null, token: string | number | null): Promise<pg.DatabaseError | undefined> {
  const c = await connect();
  await c.query('BEGIN');
  try {
    await c.query(`SELECT ${s}.assert_lease($1, $2)`, [job, token]);
    return undefined;
  } catch (err) {
    return err as pg.DatabaseError;
  } finally {
    await c.query('ROLLBACK');
  }
}

async function expire(job: string): Promise<void> {
  await db.rows(`UPDATE ${s}.leases SET expires_at = now() - interval '1 second' WHERE name = $1`, [job]);
}

describe('holder liveness: the session recorded with the lease', () => {
  const sessionOf = async (c: pg.Client): Promise<{ pid: number; start: string }> =>
    (
      await c.query<{ pid: number; start: string }>(
        'SELECT pid, backend_start::text AS start FROM pg_stat_activity WHERE pid = pg_backend_pid()',
      )
    ).rows[0]!;
  const recorded = async (job: string): Promise<{ pid: number; start: string } | undefined> =>
    (
      await db.rows<{ pid: number; start: string }>(
        `SELECT backend_pid AS pid, backend_start::text AS start FROM ${s}.leases WHERE name = $1`,
        [job],
      )
    )[0];

  it("a live, renewing holder is busy; once its session is gone (or the pid is another session's) it is stale before expiry", async () => {
    const job = jobName('session');
    const holder = await connect();
    const gen = (await acquire(job, 'host-a:1:aaaa', 60_000, holder)).generation as string;
    expect(gen).not.toBeNull();
    // acquire() records the acquiring session: its pid and its start (a pid can be reused).
    expect(await recorded(job)).toEqual(await sessionOf(holder));
    expect((await acquire(job, 'host-b:2:bbbb', 60_000)).outcome).toBe('busy');

    // The recorded pid now belongs to a session that started at another time: not the holder's.
    await db.rows(`UPDATE ${s}.leases SET backend_start = backend_start - interval '1 second' WHERE name = $1`, [job]);
    expect((await acquire(job, 'host-b:2:bbbb', 60_000)).outcome).toBe('stale');

    // renew() records the renewing session (the runner may have reconnected): busy again.
    const other = await connect();
    const renewed = await other.query(`SELECT * FROM ${s}.renew($1, $2, $3, $4, $5)`, [
      job,
      'host-a:1:aaaa',
      gen,
      60_000,
      500,
    ]);
    expect(renewed.rows).toHaveLength(1);
    expect(await recorded(job)).toEqual(await sessionOf(other));
    expect((await acquire(job, 'host-b:2:bbbb', 60_000)).outcome).toBe('busy');

    // The session that renewed ends: stale at once, though the lease has 60 s to run.
    const otherPid = (await sessionOf(other)).pid;
    await other.end();
    await waitFor(
      'the session to leave pg_stat_activity',
      async () => (await db.rows('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [otherPid])).length === 0,
      WAIT_LIMIT_MS,
    );
    expect((await acquire(job, 'host-b:2:bbbb', 60_000)).outcome).toBe('stale');
    expect(
      (await db.rows<{ live: boolean }>(`SELECT expires_at > now() AS live FROM ${s}.leases WHERE name = $1`, [job]))[0]
        ?.live,
    ).toBe(true);
  });
});

describe('assert_lease(job, token): refusals', () => {
  it('passes for the live generation and returns nothing', async () => {
    const job = jobName('live');
    const gen = await acquired(job);
    expect(await fenceError(job, gen)).toBeUndefined();
    expect(await db.rows(`SELECT ${s}.assert_lease($1, $2) AS r`, [job, gen])).toEqual([{ r: '' }]);
  });

  it('refuses an unknown job with LJ001', async () => {
    const err = await fenceError('no-such-job', 3);
    expect(err?.code).toBe(FENCE_REFUSED);
    expect(err?.message).toBe(
      'leasejob: fence refused for job "no-such-job": unknown job, no lease was ever taken (token 3)',
    );
    expect(err?.detail).toContain('state=unknown-job');
    expect(err?.hint).toMatch(/LEASEJOB_NAME/);
  });

  it('refuses a stale token after a takeover, naming token and current generation', async () => {
    const job = jobName('stale');
    const first = await acquired(job);
    await expire(job);
    const second = await acquired(job, 'test-host:2:bbbb');
    expect(BigInt(second)).toBe(BigInt(first) + 1n);
    const err = await fenceError(job, first);
    expect(err?.code).toBe(FENCE_REFUSED);
    expect(err?.message).toBe(
      `leasejob: fence refused for job "${job}": token ${first} is stale, current generation ${second}`,
    );
    expect(err?.detail).toContain(`state=stale token=${first} generation=${second} owner=test-host:2:bbbb`);
    expect(err?.hint).toMatch(/took the lease over/);
    // A token from the future was never issued: refused too, and said so.
    const ahead = await fenceError(job, String(BigInt(second) + 5n));
    expect(ahead?.code).toBe(FENCE_REFUSED);
    expect(ahead?.message).toMatch(/token \d+ was never issued, current generation \d+$/);
  });

  it('refuses the current generation once the lease expired or was released', async () => {
    const job = jobName('expired');
    const gen = await acquired(job);
    await expire(job);
    const err = await fenceError(job, gen);
    expect(err?.code).toBe(FENCE_REFUSED);
    expect(err?.message).toMatch(
      new RegExp(
        `^leasejob: fence refused for job "${job}": lease expired at \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z \\(token ${gen} is the current generation\\)$`,
      ),
    );
    expect(err?.detail).toContain('state=expired');

    const job2 = jobName('released');
    const gen2 = await acquired(job2, 'test-host:3:cccc');
    await db.rows(`SELECT * FROM ${s}.finish($1, 'test-host:3:cccc', $2, NULL, 'none', NULL, now(), '{}')`, [
      job2,
      gen2,
    ]);
    const err2 = await fenceError(job2, gen2);
    expect(err2?.code).toBe(FENCE_REFUSED);
    expect(err2?.message).toMatch(/: lease released at .*Z \(token \d+ is the current generation\)$/);
  });

  it('refuses NULL arguments with 22004 null_value_not_allowed, not LJ001', async () => {
    const job = jobName('nulls');
    await acquired(job);
    for (const [j, t] of [
      [null, 1],
      [job, null],
      [null, null],
    ] as const) {
      const err = await fenceError(j, t);
      expect(err?.code).toBe(NULL_NOT_ALLOWED);
      expect(err?.message).toMatch(/^leasejob: assert_lease\(job, token\) needs both arguments/);
      expect(err?.hint).toMatch(/FENCE_TOKEN/);
    }
  });

  it("aborts the caller's transaction, so nothing after the refusal can commit", async () => {
    const job = jobName('abort');
    const gen = await acquired(job);
    await expire(job);
    const c = await connect();
    await c.query('BEGIN');
    await expect(c.query(`SELECT ${s}.assert_lease($1, $2)`, [job, gen])).rejects.toMatchObject({
      code: FENCE_REFUSED,
    });
    await expect(
      c.query(`INSERT INTO ${s}.fenced_units (window_key, unit, generation) VALUES ('abort', 1, $1)`, [gen]),
    ).rejects.toMatchObject({ code: '25P02' }); // in_failed_sql_transaction
    await c.query('COMMIT'); // becomes a rollback
    expect(await db.rows(`SELECT 1 FROM ${s}.fenced_units WHERE window_key = 'abort'`)).toEqual([]);
  });

  it('works for a role with only USAGE and EXECUTE (SECURITY DEFINER: no table privileges needed)', async () => {
    const job = jobName('grants');
    const gen = await acquired(job);
    const role = `lj_child_${db.schema}`;
    await db.rows(`CREATE ROLE ${role} NOLOGIN`);
    try {
      await db.rows(`GRANT USAGE ON SCHEMA ${s} TO ${role}`);
      const asRole = async (): Promise<unknown> => {
        const c = await connect();
        await c.query('BEGIN');
        try {
          await c.query(`SET LOCAL ROLE ${role}`);
          return await c.query(`SELECT ${s}.assert_lease($1, $2)`, [job, gen]);
        } finally {
          await c.query('ROLLBACK');
        }
      };
      // Not executable by PUBLIC: without the grant, permission denied.
      await expect(asRole()).rejects.toMatchObject({ code: '42501' });
      await db.rows(`GRANT EXECUTE ON FUNCTION ${s}.assert_lease(text, bigint) TO ${role}`);
      await expect(asRole()).resolves.toBeDefined();
      // ... and the role still cannot touch the lease row itself.
      const c = await connect();
      try {
        await c.query('BEGIN');
        await c.query(`SET LOCAL ROLE ${role}`);
        await expect(c.query(`SELECT 1 FROM ${s}.leases FOR SHARE`)).rejects.toMatchObject({ code: '42501' });
      } finally {
        await c.query('ROLLBACK');
      }
    } finally {
      await db.rows(`DROP OWNED BY ${role}`);
      await db.rows(`DROP ROLE ${role}`);
    }
  });
});

describe('assert_lease(job, token): FOR SHARE until the caller commits', () => {
  it('a takeover attempted while a fenced transaction is open waits until it ends', async () => {
    const job = jobName('takeover-waits');
    const r = await acquire(job, 'host-a:1:aaaa', 2_000);
    expect(r.outcome).toBe('acquired');
    const gen = r.generation as string;

    const fenced = await connect();
    const fencedPid = (await fenced.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await fenced.query('BEGIN');
    await fenced.query(`SELECT ${s}.assert_lease($1, $2)`, [job, gen]); // still valid: passes, row locked
    await fenced.query(`INSERT INTO ${s}.fenced_units (window_key, unit, generation) VALUES ($1, 1, $2)`, [job, gen]);

    // The lease expires while the transaction is still open.
    await waitFor(
      'the lease to expire',
      async () =>
        (
          await db.rows<{ due: boolean }>(
            `SELECT expires_at <= clock_timestamp() AS due FROM ${s}.leases WHERE name = $1`,
            [job],
          )
        )[0]?.due,
      WAIT_LIMIT_MS,
    );

    const contender = await connect();
    const contenderPid = (await contender.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const order: string[] = [];
    // A lock timeout longer than the test, to watch the wait itself (the runner uses 500 ms and retries).
    const takeover = acquire(job, 'host-b:2:bbbb', 2_000, contender, 120_000).then((row) => {
      order.push('acquire-returned');
      return row;
    });

    // Proof it is waiting on the fenced transaction's row lock, not merely slow.
    await waitFor(
      'the takeover to wait on the fenced transaction',
      async () => {
        const rows = await db.rows<{ blockers: number[]; wait: string | null }>(
          'SELECT pg_blocking_pids($1) AS blockers, wait_event_type AS wait FROM pg_stat_activity WHERE pid = $1',
          [contenderPid],
        );
        return rows[0]?.wait === 'Lock' && rows[0].blockers.includes(fencedPid);
      },
      WAIT_LIMIT_MS,
    );
    expect(order).toEqual([]);

    order.push('commit-sent');
    await fenced.query('COMMIT');
    const row = await takeover;
    expect(order).toEqual(['commit-sent', 'acquire-returned']);
    expect(row.outcome).toBe('acquired');
    expect(BigInt(row.generation as string)).toBe(BigInt(gen) + 1n);
    // The write committed under the old generation is there; the old token is now refused.
    expect(await db.rows(`SELECT generation FROM ${s}.fenced_units WHERE window_key = $1`, [job])).toEqual([
      { generation: gen },
    ]);
    expect((await fenceError(job, gen))?.code).toBe(FENCE_REFUSED);
  });

  it("with the runner's short lock timeout, acquire answers instead of hanging, and takes over only after the commit", async () => {
    const job = jobName('takeover-bounded');
    const gen = (await acquire(job, 'host-a:1:aaaa', 2_000)).generation as string;
    const fenced = await connect();
    await fenced.query('BEGIN');
    await fenced.query(`SELECT ${s}.assert_lease($1, $2)`, [job, gen]);
    await waitFor(
      'the lease to expire',
      async () =>
        (
          await db.rows<{ due: boolean }>(
            `SELECT expires_at <= clock_timestamp() AS due FROM ${s}.leases WHERE name = $1`,
            [job],
          )
        )[0]?.due,
      WAIT_LIMIT_MS,
    );
    const started = performance.now();
    const blocked = await acquire(job, 'host-b:2:bbbb', 2_000);
    // Answered (its lock timeout is 2 s) instead of hanging on the row lock; room for a slow machine.
    expect(performance.now() - started).toBeLessThan(15_000);
    expect(blocked.outcome).toBe('stale'); // expired holder, row still locked: wait and retry
    expect(blocked.generation).toBeNull();
    await fenced.query('COMMIT');
    const after = await acquire(job, 'host-b:2:bbbb', 2_000);
    expect(after.outcome).toBe('acquired');
    expect(BigInt(after.generation as string)).toBe(BigInt(gen) + 1n);
  });

  it("the owner's renewal fails with 55P03 after its lock_timeout while a fenced transaction is open", async () => {
    const job = jobName('renew-blocked');
    const owner = 'host-a:1:aaaa';
    const gen = await acquired(job, owner, 30_000);
    const fenced = await connect();
    await fenced.query('BEGIN');
    await fenced.query(`SELECT ${s}.assert_lease($1, $2)`, [job, gen]);
    await expect(db.rows(`SELECT * FROM ${s}.renew($1, $2, $3, 30000, 200)`, [job, owner, gen])).rejects.toMatchObject({
      code: '55P03',
    });
    await fenced.query('COMMIT');
    expect(await db.rows(`SELECT * FROM ${s}.renew($1, $2, $3, 30000, 200)`, [job, owner, gen])).toHaveLength(1);
  });

  it('fenced transactions of the same owner do not block each other (the lock is shared)', async () => {
    const job = jobName('shared');
    const gen = await acquired(job);
    const [a, b] = [await connect(), await connect()];
    await a.query('BEGIN');
    await b.query('BEGIN');
    await b.query("SET LOCAL lock_timeout = '2s'");
    await a.query(`SELECT ${s}.assert_lease($1, $2)`, [job, gen]);
    await b.query(`SELECT ${s}.assert_lease($1, $2)`, [job, gen]);
    await a.query('COMMIT');
    await b.query('COMMIT');
  });
});

// ---------------------------------------------------------------------------------------------
// The design note's timeline, through the built CLI: A is paused longer than its TTL, B takes
// over and finishes the window, A resumes.

interface WriterEvent {
  event: 'written' | 'refused' | 'stopped' | 'error';
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

/** The fenced-writer lines the child wrote to its stderr (the runner's, inherited). */
const childReports = (stderr: string): WriterEvent[] =>
  stderr
    .split('\n')
    .filter((l) => l.startsWith('fenced-writer: '))
    .map((l) => JSON.parse(l.slice('fenced-writer: '.length)) as WriterEvent);

const UNITS = 10;
const PAUSE_AFTER = 3;

function runArgs(job: string, window: string, extra: string[], writer: string[]): string[] {
  return [
    'run',
    '--name',
    job,
    '--window',
    window,
    '--ttl',
    '3s',
    '--kill-grace',
    '500ms',
    '--database-url',
    db.url,
    '--schema',
    db.schema,
    '--pass-database-url',
    ...extra,
    '--',
    process.execPath,
    fixture('fenced-writer.mjs'),
    '--units',
    String(UNITS),
    '--delay-ms',
    '100',
    ...writer,
  ];
}

async function pausedOwnerTimeline(
  resume: 'child-first' | 'together',
): Promise<{ path: 'refused' | 'stopped-before-writing'; runnerStoppedChild: boolean; runnerSawLoss: boolean }> {
  const job = jobName(`timeline-${resume}`);
  const window = `2026-09-25-${job}`; // fenced_units is keyed by window: one per test
  const marker = path.join(dir, `${job}.marker.json`);
  const logA = path.join(dir, `${job}.a.jsonl`);
  const logB = path.join(dir, `${job}.b.jsonl`);

  const a = startCli(
    runArgs(
      job,
      window,
      [],
      ['--log', logA, '--marker', marker, '--marker-after', String(PAUSE_AFTER), '--pause-ms', '30000'],
    ),
    {},
    { timeoutMs: 90_000 },
  );
  const runnerPid = a.pid!;
  strays.add(runnerPid);

  // A has committed PAUSE_AFTER units and sleeps outside any transaction: pause it there.
  const mark = await waitFor(
    'A to write its marker',
    () => {
      try {
        return JSON.parse(readFileSync(marker, 'utf8')) as { pid: number; written: number };
      } catch {
        return undefined;
      }
    },
    WAIT_LIMIT_MS,
  );
  const childGroup = procState(mark.pid)!.pgrp; // the child leads its own process group
  expect(childGroup).not.toBe(procState(runnerPid)!.pgrp);
  strays.add(-childGroup);
  // The whole host paused (a VM): the runner, the guard between it and the child (the child's
  // parent), and the child. A guard left running would stop the child at the lease's stop point
  // by itself (child-guard.test.ts); here only the fence can refuse the stale write.
  const stat = readFileSync(`/proc/${mark.pid}/stat`, 'utf8');
  const guardPid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  expect(guardPid).not.toBe(runnerPid);
  signalPid(runnerPid, 'SIGSTOP');
  signalPid(guardPid, 'SIGSTOP');
  signalGroup(childGroup, 'SIGSTOP');
  await waitFor(
    'A and its child to be stopped',
    () => procState(runnerPid)?.state === 'T' && procState(mark.pid)?.state === 'T',
    WAIT_LIMIT_MS,
  );
  const genA = (await db.rows<{ generation: string }>(`SELECT generation FROM ${s}.leases WHERE name = $1`, [job]))[0]!
    .generation;
  const writtenBeforePause = readEvents(logA)
    .filter((e) => e.event === 'written')
    .map((e) => e.unit);
  expect(writtenBeforePause).toEqual([1, 2, 3]);

  // Longer than the TTL: the lease expires with its owner still "running".
  await waitFor(
    "A's lease to expire",
    async () =>
      (
        await db.rows<{ due: boolean }>(
          `SELECT expires_at <= clock_timestamp() AS due FROM ${s}.leases WHERE name = $1`,
          [job],
        )
      )[0]?.due,
    WAIT_LIMIT_MS,
  );

  const b = await runCli(
    runArgs(job, window, ['--on-busy', 'wait', '--wait-timeout', '30s'], ['--log', logB]),
    {},
    { timeoutMs: 60_000 },
  );
  expect(b.exitCode, b.all).toBe(0);
  const lease = (
    await db.rows<{ generation: string; acquired_at: Date }>(
      `SELECT generation, acquired_at FROM ${s}.leases WHERE name = $1`,
      [job],
    )
  )[0]!;
  const genB = lease.generation;
  expect(BigInt(genB)).toBe(BigInt(genA) + 1n);
  expect(
    readEvents(logB)
      .filter((e) => e.event === 'written')
      .map((e) => e.unit),
  ).toEqual([4, 5, 6, 7, 8, 9, 10]);

  if (resume === 'child-first') {
    // As in the note: the paused process wakes and goes straight for its next write, before its
    // runner can react, so only the database can refuse it. The guard, still stopped, cannot
    // reap the child: a zombie means the child has reported and recorded its refusal.
    signalGroup(childGroup, 'SIGCONT');
    await waitFor(
      "A's child to try its next write and exit",
      () => {
        const state = procState(mark.pid)?.state;
        return state === undefined || state === 'Z';
      },
      WAIT_LIMIT_MS,
    );
    signalPid(runnerPid, 'SIGCONT');
    signalPid(guardPid, 'SIGCONT');
  } else {
    // The whole machine resumes: runner, guard and child race.
    // The guard, past the lease's stop point, may kill the child's group before it is resumed.
    for (const pid of [runnerPid, guardPid, -childGroup]) signalIfAlive(pid, 'SIGCONT');
  }
  const ra = await a;
  strays.delete(runnerPid);
  if (!procState(mark.pid)) strays.delete(-childGroup);
  expect(ra.exitCode, ra.all).toBe(75);

  // Every unit exactly once; A's rows are the three it wrote before B took over, and B's the rest.
  const rows = await db.rows<{ unit: number; generation: string; written_at: Date }>(
    `SELECT unit, generation, written_at FROM ${s}.fenced_units WHERE window_key = $1 ORDER BY unit`,
    [window],
  );
  expect(rows.map((r) => r.unit)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  const rowsA = rows.filter((r) => r.generation === genA);
  expect(rowsA.map((r) => r.unit)).toEqual([1, 2, 3]);
  expect(rows.filter((r) => r.generation === genB).map((r) => r.unit)).toEqual([4, 5, 6, 7, 8, 9, 10]);
  expect(rows.every((r) => r.generation === genA || r.generation === genB)).toBe(true);
  for (const r of rowsA) expect(r.written_at.getTime()).toBeLessThan(lease.acquired_at.getTime());
  // Nothing A's child wrote after the pause. Its reports are read from both its log file and
  // the runner's stderr (which it inherits and writes first): a SIGKILL may land in between.
  const eventsA = [...readEvents(logA), ...childReports(ra.stderr)];
  expect([...new Set(eventsA.filter((e) => e.event === 'written').map((e) => e.unit))]).toEqual([1, 2, 3]);

  const window_ = (
    await db.rows<{ outcome: string; generation: string }>(
      `SELECT outcome, generation FROM ${s}.windows WHERE job = $1`,
      [job],
    )
  )[0];
  expect(window_).toEqual({ outcome: 'completed', generation: genB });
  const takeover = await db.rows<{ detail: { previous_generation: number } }>(
    `SELECT detail FROM ${s}.events WHERE job = $1 AND kind = 'stale-takeover' AND generation = $2`,
    [job, genB],
  );
  expect(takeover).toHaveLength(1);
  expect(String(takeover[0]!.detail.previous_generation)).toBe(genA);

  const refused = eventsA.find((e) => e.event === 'refused');
  const runnerLog = logLines(ra.stderr);
  const runnerStoppedChild = runnerLog.some((l) => l.msg === 'stopping child');
  const runnerSawLoss = runnerLog.some((l) => l.msg === 'lease lost');
  if (refused) {
    expect(refused.sqlstate).toBe(FENCE_REFUSED);
    expect(refused.unit).toBe(4);
    expect(refused.message).toBe(
      `leasejob: fence refused for job "${job}": token ${genA} is stale, current generation ${genB}`,
    );
    // Recorded by the child after its rollback; only certain when nothing could kill it first.
    const ev = await db.rows(`SELECT generation FROM ${s}.events WHERE job = $1 AND kind = 'fence-refused'`, [job]);
    if (resume === 'child-first') expect(ev).toEqual([{ generation: genA }]);
    return { path: 'refused', runnerStoppedChild, runnerSawLoss };
  }
  // Otherwise the runner, or its guard past the lease's stop point, stopped the child before it
  // attempted anything: the runner saw it end by a signal.
  const childSignalled = runnerLog.some(
    (l) => l.msg === 'child exited' && (typeof l.signal === 'string' || Number(l.exitCode) >= 128),
  );
  expect(runnerStoppedChild || childSignalled, ra.all).toBe(true);
  return { path: 'stopped-before-writing', runnerStoppedChild, runnerSawLoss };
}

describe('paused owner (design note timeline) through the CLI', () => {
  it("A's child resumes first: its next write is refused with LJ001, A exits 75, B completed the window", async () => {
    const r = await pausedOwnerTimeline('child-first');
    expect(r.path).toBe('refused');
    console.info(`fencing timeline (child-first): ${JSON.stringify(r)}`);
  }, 120_000);

  it('A resumes as a whole: refused or stopped before writing, never a stale write; A exits 75', async () => {
    const r = await pausedOwnerTimeline('together');
    console.info(`fencing timeline (together): ${JSON.stringify(r)}`);
  }, 120_000);
});

// ---------------------------------------------------------------------------------------------
// The examples/ children, run as a user would.

describe('examples/', () => {
  const env = (): Record<string, string> => ({ PGOPTIONS: `-c search_path=${db.schema}` });

  it('psql-fenced-write.sh writes once per occurrence and exits 75 on a stale token', async () => {
    await db.rows(`CREATE TABLE ${s}.report_runs (idempotency_key text PRIMARY KEY, fence_token bigint NOT NULL,
      written_at timestamptz NOT NULL DEFAULT now())`);
    const job = jobName('ex-psql');
    const script = path.join(ROOT, 'examples', 'psql-fenced-write.sh');
    const args = (extra: string[]) => [
      'run',
      '--name',
      job,
      '--window',
      '2026-09-25',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--pass-database-url',
      ...extra,
      '--',
      'sh',
      script,
    ];
    const first = await runCli(args([]), env());
    expect(first.exitCode, first.all).toBe(0);
    const again = await runCli(args(['--rerun']), env());
    expect(again.exitCode, again.all).toBe(0);
    // Second attempt of the same occurrence: same key, no second row.
    expect(await db.rows(`SELECT idempotency_key, fence_token FROM ${s}.report_runs`)).toEqual([
      { idempotency_key: `${job}:2026-09-25`, fence_token: '1' },
    ]);
    const stale = await execa('sh', [script], {
      reject: false,
      all: true,
      env: {
        ...env(),
        DATABASE_URL: db.url,
        LEASEJOB_SCHEMA: db.schema,
        LEASEJOB_NAME: job,
        FENCE_TOKEN: '1',
        IDEMPOTENCY_KEY: `${job}:other`,
      },
    });
    expect(stale.exitCode, stale.all).toBe(75);
    expect(stale.all).toContain(
      `LJ001: leasejob: fence refused for job "${job}": token 1 is stale, current generation 2`,
    );
    expect(await db.rows(`SELECT 1 FROM ${s}.report_runs WHERE idempotency_key = $1`, [`${job}:other`])).toEqual([]);
    // A value with quotes goes through psql's quoting, not into the SQL text.
    const odd = await execa('sh', [script], {
      reject: false,
      all: true,
      env: {
        ...env(),
        DATABASE_URL: db.url,
        LEASEJOB_SCHEMA: db.schema,
        LEASEJOB_NAME: "x'); DROP TABLE report_runs; --",
        FENCE_TOKEN: '1',
        IDEMPOTENCY_KEY: 'k',
      },
    });
    expect(odd.exitCode, odd.all).toBe(75);
    expect(odd.all).toContain('unknown job');
    expect(await db.rows(`SELECT count(*)::int AS n FROM ${s}.report_runs`)).toEqual([{ n: 1 }]);
  });

  it('node-fenced-worker.mjs writes every unit once, and exits 75 recording fence-refused on a stale token', async () => {
    await db.rows(`CREATE TABLE ${s}.worker_units (idempotency_key text NOT NULL, unit integer NOT NULL,
      fence_token bigint NOT NULL, done_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (idempotency_key, unit))`);
    const job = jobName('ex-node');
    const worker = path.join(ROOT, 'examples', 'node-fenced-worker.mjs');
    const args = (extra: string[]) => [
      'run',
      '--name',
      job,
      '--window',
      'w1',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--pass-database-url',
      ...extra,
      '--',
      process.execPath,
      worker,
      '5',
    ];
    const first = await runCli(args([]), env());
    expect(first.exitCode, first.all).toBe(0);
    const again = await runCli(args(['--rerun']), env());
    expect(again.exitCode, again.all).toBe(0);
    expect(
      await db.rows(`SELECT unit, fence_token FROM ${s}.worker_units WHERE idempotency_key = $1 ORDER BY unit`, [
        `${job}:w1`,
      ]),
    ).toEqual([1, 2, 3, 4, 5].map((unit) => ({ unit, fence_token: '1' })));

    const stale = await execa(process.execPath, [worker, '3'], {
      reject: false,
      all: true,
      env: {
        ...env(),
        DATABASE_URL: db.url,
        LEASEJOB_SCHEMA: db.schema,
        LEASEJOB_NAME: job,
        LEASEJOB_WINDOW: 'w2',
        FENCE_TOKEN: '1',
        IDEMPOTENCY_KEY: `${job}:w2`,
      },
    });
    expect(stale.exitCode, stale.all).toBe(75);
    expect(stale.all).toContain(`token 1 is stale, current generation 2`);
    expect(await db.rows(`SELECT 1 FROM ${s}.worker_units WHERE idempotency_key = $1`, [`${job}:w2`])).toEqual([]);
    expect(
      await db.rows(`SELECT generation, window_key FROM ${s}.events WHERE job = $1 AND kind = 'fence-refused'`, [job]),
    ).toEqual([{ generation: '1', window_key: 'w2' }]);
  });
});
