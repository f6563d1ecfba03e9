// Contenders and faults: many runs on one window, a crashed holder, a stolen lease, a lost database.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, isAlive, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { startProxy } from '../helpers/proxy.mjs';
import { tempDir } from '../helpers/temp.js';
import { readPidFile } from '../helpers/signal.mjs';

const tmp = tempDir('leasejob-contention-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

const base = (name: string, url = db.url): string[] => ['--database-url', url, '--schema', db.schema, '--name', name];
const readPid = (file: string): number | false => readPidFile(file) ?? false;

/** Resolves once the running CLI has written `msg` to stderr (its log is read as it comes). */
function untilLogged(p: ReturnType<typeof startCli>, msg: string): Promise<unknown> {
  let log = '';
  p.stderr?.on('data', (d: Buffer) => (log += d.toString()));
  return waitFor(`'${msg}' in the log`, () => log.includes(msg));
}

/** Two plain connections to the test database, for calling the schema's functions directly; closed after `fn`. */
async function withTwoClients(fn: (a: pg.Client, b: pg.Client) => Promise<void>): Promise<void> {
  const { default: driver } = await import('pg');
  const [a, b] = [new driver.Client({ connectionString: db.url }), new driver.Client({ connectionString: db.url })];
  await a.connect();
  await b.connect();
  try {
    await fn(a, b);
  } finally {
    await a.end();
    await b.end();
  }
}

describe('contention and faults', () => {
  it('20 concurrent runs on one window: the child runs exactly once, the others exit 0', async () => {
    const marks = path.join(tmp, 'herd.txt');
    const runs = Array.from({ length: 20 }, () =>
      startCli(
        [
          'run',
          ...base('herd'),
          '--window',
          'w1',
          '--ttl',
          '10s',
          '--kill-grace',
          '2s',
          '--',
          process.execPath,
          fixture('append-pid.mjs'),
          marks,
          '3000',
        ],
        {},
        { timeoutMs: 90_000 },
      ),
    );
    const results = await Promise.all(runs);
    for (const r of results) expect(r.exitCode, r.all).toBe(0);
    const lines = readFileSync(marks, 'utf8').trim().split('\n');
    expect(lines).toHaveLength(1);
    const skipped = results.filter((r) =>
      logLines(r.stderr).some((l) => l.msg === 'lease busy' || l.msg === 'window already completed'),
    );
    expect(skipped).toHaveLength(19);
    const w = await db.rows<{ attempts: number; completed: boolean }>(
      `SELECT attempts, completed_at IS NOT NULL AS completed FROM ${db.schema}.windows WHERE job = 'herd'`,
    );
    expect(w).toEqual([{ attempts: 1, completed: true }]);
  });

  it('a database whose default isolation is serializable: 12 concurrent runs, one child, every run exits 0', async () => {
    // A contender whose snapshot predates the winner's commit gets 40001 rather than seeing the
    // lease held; it sends its acquire again and then sees it. Before: some exited 70.
    const url = new URL(db.url);
    url.searchParams.set('options', '-c default_transaction_isolation=serializable');
    const marks = path.join(tmp, 'serializable.txt');
    const first = await runCli(['run', ...base('serial', url.toString()), '--window', 'w0', '--', 'true']);
    expect(first.exitCode, first.all).toBe(0);
    // A writer holds the (free) lease row, so that contenders queue behind it with their
    // snapshots taken; it commits as soon as one waits. Left to chance, few collide.
    const { default: driver } = await import('pg');
    const writer = new driver.Client({ connectionString: db.url });
    await writer.connect();
    let runs: Array<ReturnType<typeof startCli>>;
    try {
      await writer.query('BEGIN');
      await writer.query(`UPDATE ${db.schema}.leases SET owner = owner WHERE name = 'serial'`);
      runs = Array.from({ length: 12 }, () =>
        startCli(
          [
            'run',
            ...base('serial', url.toString()),
            '--window',
            'w1',
            '--ttl',
            '10s',
            '--kill-grace',
            '2s',
            '--',
            process.execPath,
            fixture('append-pid.mjs'),
            marks,
            '2000',
          ],
          {},
          { timeoutMs: 90_000 },
        ),
      );
      await waitFor(
        'a contender waiting on the lease row',
        async () =>
          (
            await db.rows(
              `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%.acquire%'`,
            )
          ).length > 0,
        60_000,
        5,
      );
      await writer.query('COMMIT');
    } finally {
      await writer.end();
    }
    const results = await Promise.all(runs);
    for (const r of results) expect(r.exitCode, r.all).toBe(0);
    expect(readFileSync(marks, 'utf8').trim().split('\n')).toHaveLength(1);
    const w = await db.rows<{ attempts: number; completed: boolean }>(
      `SELECT attempts, completed_at IS NOT NULL AS completed FROM ${db.schema}.windows WHERE job = 'serial' AND window_key = 'w1'`,
    );
    expect(w).toEqual([{ attempts: 1, completed: true }]);
  });

  it('a statement the server rolls back (40001, 40P01) is sent again; rolled back every time: exit 69 in one line', async () => {
    // Injected where the acquire writes the lease row: the first `n` writes of job 'rolled'
    // fail as a serialization failure or a deadlock would (a sequence counts them, untouched by
    // the rollback).
    await db.rows(`CREATE SEQUENCE ${db.schema}.rollback_count`);
    await db.rows(`CREATE TABLE ${db.schema}.rollback_plan (fail_first int NOT NULL, code text NOT NULL)`);
    await db.rows(`INSERT INTO ${db.schema}.rollback_plan VALUES (0, '40001')`);
    await db.rows(`CREATE FUNCTION ${db.schema}.roll_back() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE plan record;
      BEGIN
        SELECT * INTO plan FROM ${db.schema}.rollback_plan;
        IF NEW.name = 'rolled' AND nextval('${db.schema}.rollback_count') <= plan.fail_first THEN
          RAISE EXCEPTION 'injected rollback' USING ERRCODE = plan.code;
        END IF;
        RETURN NEW;
      END $$`);
    await db.rows(
      `CREATE TRIGGER roll_back BEFORE INSERT OR UPDATE ON ${db.schema}.leases FOR EACH ROW EXECUTE FUNCTION ${db.schema}.roll_back()`,
    );
    const plan = async (failFirst: number, code: string): Promise<void> => {
      await db.rows(`SELECT setval('${db.schema}.rollback_count', 1, false)`);
      await db.rows(`UPDATE ${db.schema}.rollback_plan SET fail_first = $1, code = $2`, [failFirst, code]);
    };
    const marks = path.join(tmp, 'rolled.txt');
    const child = ['--', process.execPath, fixture('append-pid.mjs'), marks];
    try {
      // Two serialization failures, then a deadlock: the run completes, its child ran once.
      await plan(2, '40001');
      const a = await runCli(['run', ...base('rolled'), '--window', 'w1', ...child]);
      expect(a.exitCode, a.all).toBe(0);
      await plan(1, '40P01');
      const b = await runCli(['run', ...base('rolled'), '--window', 'w2', ...child]);
      expect(b.exitCode, b.all).toBe(0);
      expect(readFileSync(marks, 'utf8').trim().split('\n')).toHaveLength(2);
      expect(
        Number((await db.rows<{ n: string }>(`SELECT last_value AS n FROM ${db.schema}.rollback_count`))[0]!.n),
      ).toBeGreaterThanOrEqual(2);

      // Rolled back on every try: a clear line and exit 69, the child never started.
      await plan(1_000, '40001');
      const c = await runCli(['run', ...base('rolled'), '--window', 'w3', ...child]);
      expect(c.exitCode, c.all).toBe(69);
      expect(
        c.stderr
          .trim()
          .split('\n')
          .filter((l) => !l.startsWith('{')),
      ).toEqual([
        expect.stringMatching(
          /^leasejob: database at .* refused: injected rollback \(SQLSTATE 40001\); a serialization failure on every try: .*default_transaction_isolation/,
        ),
      ]);
      expect(readFileSync(marks, 'utf8').trim().split('\n')).toHaveLength(2);
      expect(await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE job = 'rolled' AND window_key = 'w3'`)).toEqual(
        [],
      );

      // The holder's renewals rolled back: it keeps its session (the one the lease records),
      // so a contender sees a live holder and skips at once, rather than waiting out the lease
      // of one whose session looks gone. Then renewals go through again and the run completes.
      await plan(0, '40001');
      const release = path.join(tmp, 'rolled.release');
      const holder = startCli([
        'run',
        ...base('rolled'),
        '--window',
        'w4',
        '--ttl',
        '20s',
        '--',
        process.execPath,
        fixture('wait-for-file.mjs'),
        release,
      ]);
      await waitFor(
        'the holder to take the lease',
        async () =>
          (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'rolled' AND expires_at > now()`)).length > 0,
      );
      await plan(1_000, '40001');
      await waitFor(
        'a renewal to be rolled back',
        async () =>
          Number((await db.rows<{ n: string }>(`SELECT last_value AS n FROM ${db.schema}.rollback_count`))[0]!.n) > 2,
        30_000,
      );
      const sessions = await db.rows<{ alive: boolean }>(
        `SELECT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.backend_pid) AS alive FROM ${db.schema}.leases l WHERE l.name = 'rolled'`,
      );
      expect(sessions).toEqual([{ alive: true }]);
      const contender = await runCli(['run', ...base('rolled'), '--window', 'w4', '--', 'true']);
      expect(contender.exitCode, contender.all).toBe(0);
      expect(logLines(contender.stderr).map((l) => l.msg)).toContain('lease busy');
      await plan(0, '40001');
      writeFileSync(release, '');
      const done = await holder;
      expect(done.exitCode, done.all).toBe(0);
    } finally {
      await db.rows(`DROP TRIGGER roll_back ON ${db.schema}.leases`);
    }
  });

  it('--on-busy fail exits 75 and --on-busy wait takes the lease once it is free', async () => {
    const pidFile = path.join(tmp, 'busy.pid');
    const release = path.join(tmp, 'busy.release');
    // The holder's child ends when the test says: the two runs that must find it busy take
    // seconds each on a loaded machine (a fixed 2.5 s child had ended before the second).
    const holder = startCli([
      'run',
      ...base('busy'),
      '--ttl',
      '20s',
      '--',
      process.execPath,
      fixture('wait-for-file.mjs'),
      release,
    ]);
    await waitFor(
      'holder to take the lease',
      async () =>
        (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'busy' AND expires_at > now()`)).length > 0,
    );
    const fail = await runCli([
      'run',
      ...base('busy'),
      '--on-busy',
      'fail',
      '--',
      process.execPath,
      fixture('exit-with.mjs'),
      '0',
    ]);
    expect(fail.exitCode, fail.all).toBe(75);
    const timeout = await runCli([
      'run',
      ...base('busy'),
      '--on-busy',
      'wait',
      '--wait-timeout',
      '300ms',
      '--',
      process.execPath,
      fixture('exit-with.mjs'),
      '0',
    ]);
    expect(timeout.exitCode, timeout.all).toBe(75);
    const wait = startCli([
      'run',
      ...base('busy'),
      '--on-busy',
      'wait',
      '--',
      process.execPath,
      fixture('write-env.mjs'),
      pidFile,
    ]);
    await untilLogged(wait, 'lease busy, waiting');
    writeFileSync(release, '');
    const held = await holder;
    expect(held.exitCode, held.all).toBe(0);
    const waited = await wait;
    expect(waited.exitCode, waited.all).toBe(0);
    expect(JSON.parse(readFileSync(pidFile, 'utf8')).FENCE_TOKEN).toBe('2');
  });

  it('--on-busy wait says at info that it waits, once; --wait-timeout holds against a stale holder too', async () => {
    const release = path.join(tmp, 'busy-info.release');
    const holder = startCli([
      'run',
      ...base('busy-info'),
      '--ttl',
      '20s',
      '--',
      process.execPath,
      fixture('wait-for-file.mjs'),
      release,
    ]);
    await waitFor(
      'holder to take the lease',
      async () =>
        (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'busy-info' AND expires_at > now()`)).length > 0,
    );
    const waiter = startCli(['run', ...base('busy-info'), '--on-busy', 'wait', '--', 'true']);
    // Two polls at least (one a second) before the holder lets go.
    await untilLogged(waiter, 'lease busy, waiting');
    await new Promise((r) => setTimeout(r, 1_500));
    writeFileSync(release, '');
    const wait = await waiter;
    expect(wait.exitCode, wait.all).toBe(0);
    expect(
      logLines(wait.stderr)
        .filter((l) => l.msg === 'lease busy, waiting')
        .map((l) => l.level),
    ).toEqual(['info']);
    expect((await holder).exitCode).toBe(0);

    // A holder SIGKILLed with 20 s left on its lease: stale, waited out to expiry, but not past --wait-timeout.
    const pidFile = path.join(tmp, 'stale-wait.pid');
    const dead = startCli([
      'run',
      ...base('stale-wait'),
      '--ttl',
      '20s',
      '--',
      process.execPath,
      fixture('forever.mjs'),
      pidFile,
    ]);
    await waitFor('child ready', () => readPid(pidFile));
    dead.kill('SIGKILL');
    await dead;
    const r = await runCli(['run', ...base('stale-wait'), '--on-busy', 'wait', '--wait-timeout', '1s', '--', 'true']);
    expect(r.exitCode, r.all).toBe(75);
    expect(r.stderr).toMatch(/still held by a stale owner .* after waiting \d+ ms \(--wait-timeout\)/);
    // It gave up at its --wait-timeout, not at the stale lease's expiry 20 s on, by its own count
    // (process start-up on a busy machine is no part of it).
    expect(Number(/after waiting (\d+) ms/.exec(r.stderr)?.[1])).toBeLessThan(10_000);
  });

  it('--on-busy wait rides out a brief database outage while it waits', async () => {
    const proxy = await startProxy(db.url);
    try {
      const pidFile = path.join(tmp, 'wait-blip.pid');
      const release = path.join(tmp, 'wait-blip.release');
      const holder = startCli([
        'run',
        ...base('wait-blip'),
        '--ttl',
        '20s',
        '--',
        process.execPath,
        fixture('wait-for-file.mjs'),
        release,
      ]);
      await waitFor(
        'holder to take the lease',
        async () =>
          (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'wait-blip' AND expires_at > now()`)).length >
          0,
      );
      const waiter = startCli([
        'run',
        ...base('wait-blip', proxy.url(db.url)),
        '--on-busy',
        'wait',
        '--ttl',
        '6s',
        '--kill-grace',
        '1s',
        '--',
        process.execPath,
        fixture('write-env.mjs'),
        pidFile,
      ]);
      await untilLogged(waiter, 'lease busy, waiting');
      // Reset for 1.5 s: at least one of its polls (one a second) fails.
      proxy.cut('reset');
      await new Promise((r) => setTimeout(r, 1_500));
      proxy.heal();
      writeFileSync(release, '');
      const r = await waiter;
      expect(r.exitCode, r.all).toBe(0);
      expect(logLines(r.stderr).map((l) => l.msg)).toContain('database unavailable while waiting; retrying');
      expect(JSON.parse(readFileSync(pidFile, 'utf8')).FENCE_TOKEN).toBe('2');
      expect((await holder).exitCode).toBe(0);
    } finally {
      proxy.heal();
      await proxy.close();
    }
  });

  it('--on-busy wait with the database gone silent past --wait-timeout: exit 75 by then, as any wait timeout', async () => {
    const proxy = await startProxy(db.url);
    const holder = startCli([
      'run',
      ...base('wait-gone'),
      '--ttl',
      '20s',
      '--',
      process.execPath,
      fixture('sleep-then.mjs'),
      '8000',
      '0',
    ]);
    try {
      await waitFor(
        'holder to take the lease',
        async () =>
          (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'wait-gone' AND expires_at > now()`)).length >
          0,
      );
      const t0 = performance.now();
      const waiter = startCli([
        'run',
        ...base('wait-gone', proxy.url(db.url)),
        '--on-busy',
        'wait',
        '--wait-timeout',
        '3s',
        '--ttl',
        '20s',
        '--',
        'true',
      ]);
      await untilLogged(waiter, 'lease busy, waiting');
      // Silent, not refused: each acquire waits no longer than the wait left.
      proxy.cut('blackhole');
      const r = await waiter;
      expect(r.exitCode, r.all).toBe(75);
      // 3 s, then at most 1 s asking to give back what the last acquire may have taken: bounded
      // far from a hang (the black hole answers nothing, ever), with room for a slow machine.
      expect(performance.now() - t0).toBeLessThan(18_000);
      expect(r.stderr).toMatch(/not acquired within --wait-timeout \(\d+ ms\): the database was unavailable/);
    } finally {
      holder.kill('SIGTERM');
      await holder;
      proxy.heal();
      await proxy.close();
    }
  });

  it('holder and child SIGKILLed mid-run: a retry takes over once the lease expired, not before, and completes the window', async () => {
    const pidFile = path.join(tmp, 'crash.pid');
    const args = [...base('crash'), '--window', 'w', '--ttl', '3s', '--kill-grace', '500ms'];
    const holder = startCli(['run', ...args, '--', process.execPath, fixture('forever.mjs'), pidFile]);
    const childPid = await waitFor('child ready', () => readPid(pidFile));
    holder.kill('SIGKILL');
    await holder;
    const expiredAt = (
      await db.rows<{ expires_at: Date }>(`SELECT expires_at FROM ${db.schema}.leases WHERE name = 'crash'`)
    )[0]!.expires_at;
    // The parent-death signal takes the child down with its runner.
    await waitFor('orphaned child to die', () => !isAlive(childPid), 10_000);

    const retry = await runCli(['run', ...args, '--', process.execPath, fixture('exit-with.mjs'), '0']);
    expect(retry.exitCode, retry.all).toBe(0);
    const w = await db.rows<{ attempts: number; completed: boolean; generation: string }>(
      `SELECT attempts, completed_at IS NOT NULL AS completed, generation FROM ${db.schema}.windows WHERE job = 'crash'`,
    );
    expect(w).toEqual([{ attempts: 2, completed: true, generation: '2' }]);
    const ev = await db.rows<{ kind: string; db_time: Date }>(
      `SELECT kind, db_time FROM ${db.schema}.events WHERE job = 'crash' AND kind = 'stale-takeover'`,
    );
    expect(ev).toHaveLength(1);
    // Ordered on the database clock: never before the dead holder's expiry. How soon after it
    // (TTL + one renew interval at most) is a latency, measured by the chaos suite's report
    // ("takeover latency after a crash"), not asserted against a wall clock here.
    expect(ev[0]!.db_time.getTime()).toBeGreaterThanOrEqual(expiredAt.getTime());
  });

  it('the lease row taken by someone else mid-run: the child gets SIGTERM and run exits 75', async () => {
    const pidFile = path.join(tmp, 'stolen.pid');
    const run = startCli([
      'run',
      ...base('stolen'),
      '--window',
      'w',
      '--ttl',
      '3s',
      '--kill-grace',
      '500ms',
      '--',
      process.execPath,
      fixture('trap-term.mjs'),
      pidFile,
    ]);
    await waitFor('child ready', () => readPid(pidFile));
    await db.rows(
      `UPDATE ${db.schema}.leases SET owner = 'intruder:1:x', generation = generation + 1, expires_at = now() + interval '1 hour' WHERE name = 'stolen'`,
    );
    const r = await run;
    expect(r.exitCode, r.all).toBe(75);
    expect(readFileSync(pidFile, 'utf8')).toContain('SIGTERM');
    expect(logLines(r.stderr).some((l) => l.msg === 'lease lost')).toBe(true);
    const w = await db.rows<{ completed: boolean; outcome: string }>(
      `SELECT completed_at IS NOT NULL AS completed, outcome FROM ${db.schema}.windows WHERE job = 'stolen'`,
    );
    expect(w[0]?.completed).toBe(false);
  });

  it('the database goes away mid-run: the child is stopped before the lease can expire', async () => {
    const proxy = await startProxy(db.url);
    try {
      const pidFile = path.join(tmp, 'cut.pid');
      const run = startCli([
        'run',
        ...base('cut', proxy.url(db.url)),
        '--window',
        'w',
        '--ttl',
        '3s',
        '--kill-grace',
        '500ms',
        '--',
        process.execPath,
        fixture('ignore-sigterm.mjs'),
        pidFile,
      ]);
      const childPid = await waitFor('child ready', () => readPid(pidFile));
      // Let one renewal succeed, so the deadline is measured from a renewal, not the acquire.
      await waitFor(
        'a renewal',
        async () =>
          (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'cut' AND renewed_at > acquired_at`)).length >
          0,
        10_000,
      );
      proxy.cut();
      await waitFor('child stopped', () => !isAlive(childPid), 10_000, 20);
      const lease = await db.rows<{ before_expiry: boolean; left_ms: number }>(
        `SELECT now() < expires_at AS before_expiry, extract(epoch FROM expires_at - now()) * 1000 AS left_ms FROM ${db.schema}.leases WHERE name = 'cut'`,
      );
      expect(lease[0]?.before_expiry, `child outlived the lease by ${-Number(lease[0]?.left_ms)} ms`).toBe(true);
      const r = await run;
      expect(r.exitCode, r.all).toBe(75);
      expect(logLines(r.stderr).some((l) => l.msg === 'renewal failed')).toBe(true);
      // It could not say so, so the next run's takeover records the loss (once) and resumes the window.
      const next = await runCli([
        'run',
        ...base('cut'),
        '--window',
        'w',
        '--ttl',
        '3s',
        '--kill-grace',
        '500ms',
        '--',
        'true',
      ]);
      expect(next.exitCode, next.all).toBe(0);
      const lost = await db.rows<{ generation: string; window_key: string }>(
        `SELECT generation, window_key FROM ${db.schema}.events WHERE job = 'cut' AND kind = 'lease-lost'`,
      );
      expect(lost).toEqual([{ generation: '1', window_key: 'w' }]);
      const counted = await db.rows<{ n: string }>(
        `SELECT sum(n) AS n FROM ${db.schema}.event_counts WHERE job = 'cut' AND kind = 'lease-lost'`,
      );
      expect(Number(counted[0]?.n)).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it('a short database outage: renewals fail, a retry succeeds before the deadline, the run completes', async () => {
    const proxy = await startProxy(db.url);
    try {
      const pidFile = path.join(tmp, 'blip.pid');
      // TTL 6 s, renew every 2 s, stop at 6 - 1 - 0.6 = 4.4 s after the last good renewal.
      const run = startCli([
        'run',
        ...base('blip', proxy.url(db.url)),
        '--window',
        'w',
        '--ttl',
        '6s',
        '--kill-grace',
        '1s',
        '--',
        'sh',
        '-c',
        `echo $$ > ${pidFile}; sleep 9`,
      ]);
      await waitFor('child ready', () => readPid(pidFile));
      await waitFor(
        'a renewal',
        async () =>
          (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'blip' AND renewed_at > acquired_at`)).length >
          0,
        10_000,
      );
      proxy.cut();
      await new Promise((r) => setTimeout(r, 2_500));
      proxy.heal();
      const r = await run;
      expect(r.exitCode, r.all).toBe(0);
      expect(logLines(r.stderr).some((l) => l.msg === 'renewal failed')).toBe(true);
      expect(logLines(r.stderr).some((l) => l.msg === 'lease lost')).toBe(false);
      const ev = await db.rows<{ kind: string }>(
        `SELECT kind FROM ${db.schema}.events WHERE job = 'blip' ORDER BY seq`,
      );
      expect(ev.map((e) => e.kind)).toContain('renew-failed');
      expect(ev.map((e) => e.kind)).toContain('window-completed');
    } finally {
      await proxy.close();
    }
  });

  it('the database drops just as the child ends: finish is retried while the lease lasts and the window completes', async () => {
    const proxy = await startProxy(db.url);
    try {
      const pidFile = path.join(tmp, 'drop-at-end.pid');
      const go = path.join(tmp, 'drop-at-end.go');
      // TTL 6 s, renew every 2 s: at least 4 s of lease left at any moment the child ends.
      const run = startCli([
        'run',
        ...base('drop-at-end', proxy.url(db.url)),
        '--window',
        'w',
        '--ttl',
        '6s',
        '--kill-grace',
        '1s',
        '--',
        'sh',
        '-c',
        `echo $$ > ${pidFile}; while [ ! -e ${go} ]; do sleep 0.05; done`,
      ]);
      const childPid = await waitFor('child ready', () => readPid(pidFile));
      proxy.cut();
      writeFileSync(go, '');
      await waitFor('the child to end', () => !isAlive(childPid), 10_000);
      await new Promise((r) => setTimeout(r, 800));
      proxy.heal();
      const r = await run;
      expect(r.exitCode, r.all).toBe(0);
      expect(
        logLines(r.stderr).some((l) => l.msg === 'could not record outcome yet; retrying while the lease lasts'),
        r.stderr,
      ).toBe(true);
      const ev = await db.rows<{ kind: string }>(
        `SELECT kind FROM ${db.schema}.events WHERE job = 'drop-at-end' ORDER BY seq`,
      );
      expect(ev.map((e) => e.kind).filter((k) => k !== 'renew-failed')).toEqual([
        'acquired',
        'window-claimed',
        'window-completed',
        'released',
      ]);
    } finally {
      await proxy.close();
    }
  });

  it('a black-holed database: run exits 69 after one connect timeout (the early connection is not retried)', async () => {
    const proxy = await startProxy(db.url);
    try {
      proxy.hold();
      const t0 = performance.now();
      const r = await runCli(['run', ...base('black-hole', proxy.url(db.url)), '--window', 'w', '--', 'true']);
      const elapsed = performance.now() - t0;
      expect(r.exitCode, r.all).toBe(69);
      expect(r.stderr).toMatch(/database unreachable/);
      // It waited out pg's connect timeout (5 s) once, and opened no second connection after it:
      // counted at the proxy rather than timed, so a slow machine cannot fail it.
      expect(elapsed).toBeGreaterThan(4_500);
      expect(proxy.connections()).toHaveLength(1);

      // Bad flags are reported without waiting for that connection, and nothing is written.
      const bad = await runCli([
        'run',
        ...base('black-hole-bad', proxy.url(db.url)),
        '--window',
        'w',
        '--ttl',
        'soon',
        '--',
        'true',
      ]);
      expect(bad.exitCode, bad.all).toBe(64);
      expect(await db.rows(`SELECT 1 FROM ${db.schema}.jobs WHERE name LIKE 'black-hole%'`)).toHaveLength(0);
    } finally {
      proxy.heal();
      await proxy.close();
    }
  });

  it('a black-holed database: status exits 69 after one connect timeout; bad check flags are reported at once', async () => {
    const proxy = await startProxy(db.url);
    try {
      proxy.hold();
      const db2 = ['--database-url', proxy.url(db.url), '--schema', db.schema];
      const t0 = performance.now();
      const r = await runCli(['status', ...db2]);
      const elapsed = performance.now() - t0;
      expect(r.exitCode, r.all).toBe(69);
      expect(r.stderr).toMatch(/database unreachable/);
      // Its two reads open their connections side by side: one timeout, not one after the other
      // (the second opened before the first gave up; seen at the proxy, not timed).
      expect(elapsed).toBeGreaterThan(4_500);
      const conns = proxy.connections();
      expect(conns).toHaveLength(2);
      expect(conns[1]!.openedAt).toBeLessThan(conns[0]!.closedAt ?? Infinity);
      const bad = await runCli(['check', ...db2, '--max-hold', 'forever']);
      expect(bad.exitCode, bad.all).toBe(3); // UNKNOWN, as monitoring plugins say a bad flag
      expect(bad.stderr).toMatch(/--max-hold/);
      // Reported at once: no connection opened for it.
      expect(proxy.connections()).toHaveLength(2);
    } finally {
      proxy.heal();
      await proxy.close();
    }
  });

  it('an acquisition answered after the stop point never starts the child: exit 75, lease released', async () => {
    const proxy = await startProxy(db.url);
    try {
      const marks = path.join(tmp, 'late.txt');
      // TTL 3 s, grace 500 ms: the stop point is 2.2 s after the acquire was sent.
      proxy.hold();
      const run = startCli([
        'run',
        ...base('late', proxy.url(db.url)),
        '--window',
        'w',
        '--ttl',
        '3s',
        '--kill-grace',
        '500ms',
        '--',
        process.execPath,
        fixture('append-pid.mjs'),
        marks,
      ]);
      await new Promise((r) => setTimeout(r, 3_500));
      proxy.heal();
      const r = await run;
      expect(r.exitCode, r.all).toBe(75);
      expect(logLines(r.stderr).some((l) => l.msg === 'lease acquired too late to start safely')).toBe(true);
      expect(existsSync(marks)).toBe(false);
      const w = await db.rows<{ completed: boolean }>(
        `SELECT completed_at IS NOT NULL AS completed FROM ${db.schema}.windows WHERE job = 'late'`,
      );
      expect(w).toEqual([{ completed: false }]);
      const lease = await db.rows<{ released: boolean }>(
        `SELECT released_at IS NOT NULL AS released FROM ${db.schema}.leases WHERE name = 'late'`,
      );
      expect(lease).toEqual([{ released: true }]);
    } finally {
      await proxy.close();
    }
  });

  it('a slow answer to the acquire is not taken for a skewed clock', async () => {
    const proxy = await startProxy(db.url);
    try {
      // The acquire runs at once, its answer comes 5.5 s later: the midpoint of the round trip
      // is 2.75 s after the database's clock read (± 2.75 s). Held from when the statement is
      // seen, so however slowly the runner starts. (A connection held before it was the same
      // test, timed from the spawn: a runner slow to start on a loaded machine saw a shorter
      // round trip, an offset under 2 s, and the test failed.)
      proxy.slowAnswers('.acquire', 5_500);
      const r = await runCli([
        'run',
        ...base('slow-connect', proxy.url(db.url)),
        '--window',
        'w',
        '--ttl',
        '30s',
        '--',
        'true',
      ]);
      expect(r.exitCode, r.all).toBe(0);
      const acquired = logLines(r.stderr).find((l) => l.msg === 'lease acquired');
      expect(Math.abs(Number(acquired?.offsetMs))).toBeGreaterThan(2_000);
      expect(logLines(r.stderr).map((l) => l.msg)).not.toContain('clock offset to database is large');
      expect(
        await db.rows(`SELECT 1 FROM ${db.schema}.events WHERE job = 'slow-connect' AND kind = 'clock-offset'`),
      ).toHaveLength(0);
    } finally {
      proxy.heal();
      await proxy.close();
    }
  });

  it('a finish that commits while a contender queues for the lease row reads as released, not lost (and its window as done)', async () => {
    await withTwoClients(async (a, b) => {
      const acq = (c: pg.Client, owner: string) =>
        c.query(
          `SELECT * FROM ${db.schema}.acquire('finish-race', $1, 1500, 500, NULL, NULL, false, NULL, now(), NULL, 2000)`,
          [owner],
        );
      const c3 = (c: pg.Client, owner: string) =>
        c.query(
          `SELECT * FROM ${db.schema}.acquire('finish-race-w', $1, 1500, 500, 'w', NULL, false, NULL, now(), NULL, 2000)`,
          [owner],
        );
      const first = await acq(a, 'race-a:1:a');
      expect(first.rows[0].outcome).toBe('acquired');
      // The owner's finish begins while its lease still holds, and commits late.
      await a.query('BEGIN');
      const fin = await a.query(
        `SELECT * FROM ${db.schema}.finish('finish-race', 'race-a:1:a', $1, NULL, 'none', 0, now(), '{}')`,
        [first.rows[0].generation],
      );
      expect(fin.rows[0].held).toBe(true);
      await new Promise((r) => setTimeout(r, 1_700));
      // The lease has expired by the clock; the contender queues for the row lock.
      const second = acq(b, 'race-b:2:b');
      await new Promise((r) => setTimeout(r, 300));
      await a.query('COMMIT');
      expect((await second).rows[0]).toMatchObject({ outcome: 'acquired', generation: '2' });
      const kinds = await db.rows<{ kind: string }>(
        `SELECT kind FROM ${db.schema}.events WHERE job = 'finish-race' ORDER BY seq`,
      );
      expect(kinds.map((k) => k.kind)).toEqual(['acquired', 'released', 'acquired']);

      // With a window, completed by that late finish: the contender finds it done, spending no generation.
      const w1 = await c3(a, 'race-a:1:a');
      expect(w1.rows[0]).toMatchObject({ outcome: 'acquired', generation: '1' });
      await a.query('BEGIN');
      await a.query(
        `SELECT * FROM ${db.schema}.finish('finish-race-w', 'race-a:1:a', 1, 'w', 'completed', 0, now(), '{}')`,
      );
      await new Promise((r) => setTimeout(r, 1_700));
      const w2 = c3(b, 'race-b:2:b');
      await new Promise((r) => setTimeout(r, 300));
      await a.query('COMMIT');
      expect((await w2).rows[0]).toMatchObject({ outcome: 'done', generation: null });
      const wkinds = await db.rows<{ kind: string }>(
        `SELECT kind FROM ${db.schema}.events WHERE job = 'finish-race-w' ORDER BY seq`,
      );
      expect(wkinds.map((k) => k.kind)).toEqual(['acquired', 'window-claimed', 'window-completed', 'released']);
      const lease = await db.rows<{ generation: string }>(
        `SELECT generation FROM ${db.schema}.leases WHERE name = 'finish-race-w'`,
      );
      expect(lease).toEqual([{ generation: '1' }]);
    });
  });

  it("a renewal whose transaction began before the owner's finish never makes the released lease live again", async () => {
    await withTwoClients(async (a, b) => {
      const {
        rows: [acq],
      } = await a.query(
        `SELECT * FROM ${db.schema}.acquire('renew-race', 'rr:1:a', 30000, 10000, NULL, NULL, false, NULL, now(), NULL, 500)`,
      );
      expect(acq.outcome).toBe('acquired');
      // The renewal's transaction (its now()) begins first; the finish commits meanwhile.
      await b.query('BEGIN');
      await b.query('SELECT now()');
      await new Promise((r) => setTimeout(r, 50));
      const fin = await a.query(
        `SELECT * FROM ${db.schema}.finish('renew-race', 'rr:1:a', $1, NULL, 'none', 0, now(), '{}')`,
        [acq.generation],
      );
      expect(fin.rows[0].held).toBe(true);
      const renewed = await b.query(`SELECT * FROM ${db.schema}.renew('renew-race', 'rr:1:a', $1, 30000, 500)`, [
        acq.generation,
      ]);
      await b.query('COMMIT');
      expect(renewed.rows).toEqual([]);
      // Released it stays: the next owner takes it at once.
      const {
        rows: [next],
      } = await a.query(
        `SELECT * FROM ${db.schema}.acquire('renew-race', 'rr:2:b', 30000, 10000, NULL, NULL, false, NULL, now(), NULL, 500)`,
      );
      expect(next).toMatchObject({ outcome: 'acquired', generation: '2' });
    });
  });

  it("acquire and finish of one job never deadlock, whatever the runners' registry settings", async () => {
    // Two runner configurations on one job (as during a rolling change), 24 connections racing.
    const { default: pg } = await import('pg');
    const until = Date.now() + 6_000;
    const errors: string[] = [];
    let acquired = 0;
    await Promise.all(
      Array.from({ length: 24 }, async (_, i) => {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        const spec = JSON.stringify({
          schedule: null,
          tz: 'UTC',
          window_mode: 'literal',
          alert_after_ms: i % 2 ? 60_000 : null,
        });
        try {
          while (Date.now() < until) {
            const owner = `dl:${i}:${Math.random().toString(16).slice(2, 10)}`;
            try {
              const { rows } = await c.query(
                `SELECT * FROM ${db.schema}.acquire('deadlock', $1, 3000, 1000, $2, NULL, false, NULL, now(), $3, 500)`,
                [owner, `w${i % 3}`, spec],
              );
              if (rows[0].outcome === 'acquired') {
                acquired += 1;
                await c.query(`SELECT * FROM ${db.schema}.finish('deadlock', $1, $2, $3, 'failed', 1, now(), '{}')`, [
                  owner,
                  rows[0].generation,
                  `w${i % 3}`,
                ]);
              } else {
                await c.query(
                  `SELECT ${db.schema}.record_event('deadlock', 'busy-skip', NULL, $1, NULL, now(), '{}')`,
                  [owner],
                );
              }
            } catch (err) {
              errors.push(`${(err as { code?: string }).code} ${(err as Error).message}`);
            }
          }
        } finally {
          await c.end();
        }
      }),
    );
    expect(errors.slice(0, 3)).toEqual([]);
    expect(acquired).toBeGreaterThan(10);
  });
});
