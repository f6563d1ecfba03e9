// One occurrence, one state machine (issue 19, docs/occurrence.md): the transitions one path
// forgot, each on both stores with real CLI processes and real children. A replaced attempt
// spends the budget; a crashed holder's attempt released by `leasejob release` spends it; a crash
// taken over is not skipped by its own backoff; a schedule change does not page for occurrences
// of the new schedule that were never due. (The embedded store's tokens after a restored file
// are in embedded-token-floor.test.ts.) Counts come from the children's own record and the
// ledger; no elapsed time is asserted.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { fixture, isAlive, runCli, scrapeOnce, startCli, waitFor } from '../helpers/cli.js';
import { bothStores, NO_DB_ENV } from '../helpers/both-stores.js';
import { tempDir } from '../helpers/temp.js';
import { readPidFile } from '../helpers/signal.mjs';

const tmp = tempDir('leasejob-lifecycle-');
const noDb = NO_DB_ENV;
const { db, stores } = bothStores('leasejob-lifecycle-state-');

// A holder that must keep its lease while the test acts on it (replace): 15 s, as elsewhere.
const HOLDER_TTL = '15s';
const HOUR0 = '2026-01-01T00:00:00Z';
const HOUR1 = '2026-01-01T01:00:00Z';
const KEY0 = '2026-01-01T00:00Z';
const HOURLY = ['--schedule', '0 * * * *', '--window-from-schedule', '--window-format', "yyyy-MM-dd'T'HH:mm'Z'"];

/** The children's own record: one JSON line of its environment per start (append-env.mjs). */
const starts = (file: string): Array<Record<string, string>> =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, string>)
    : [];

function metric(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
/** An instant as an occurrence's --scheduled-time, to the second. */
const iso = (ms: number): string => new Date(ms).toISOString().replace('.000Z', 'Z');
/** The latest tick at or before now of a schedule that fires `offsetMs` into every `periodMs` (UTC). */
const latestTick = (periodMs: number, offsetMs: number, now = Date.now()): number =>
  Math.floor((now - offsetMs) / periodMs) * periodMs + offsetMs;

describe.each(stores)('one occurrence, one state machine, in %s', (store, conn) => {
  const tag = store === 'PostgreSQL' ? 'pg' : 'lite';
  const kinds = async (job: string, window: string): Promise<string[]> => {
    const r = await runCli(['history', ...conn(), '--name', job, '--window', window, '--json', '--limit', '200'], noDb);
    expect(r.exitCode, r.all).toBe(0);
    return (JSON.parse(r.stdout) as Array<{ kind: string }>).map((e) => e.kind);
  };
  /** How a test says the job was registered at `ms` (ticks before a registration are not expected). */
  const registeredAt = async (job: string, ms: number): Promise<void> => {
    if (store === 'PostgreSQL') {
      await db().rows(`UPDATE ${db().schema}.jobs SET created_at = $2 WHERE name = $1`, [job, new Date(ms)]);
      return;
    }
    const s = new Database(conn()[1]!);
    s.prepare('UPDATE jobs SET created_at = ? WHERE name = ?').run(ms, job);
    s.close();
  };

  it('--max-attempts 1: an attempt stopped by --on-busy replace spends the budget; a later trigger skips it as exhausted', async () => {
    const job = `lc-replace-${tag}`;
    const file = path.join(tmp, `${job}.jsonl`);
    const run = (at: string, extra: string[], child: string[]) =>
      startCli(
        [
          'run',
          ...conn(),
          '--name',
          job,
          ...HOURLY,
          '--tz',
          'UTC',
          '--scheduled-time',
          at,
          '--max-attempts',
          '1',
        ].concat(extra, ['--', process.execPath, ...child]),
        noDb,
      );
    const holder = run(HOUR0, ['--ttl', HOLDER_TTL], [fixture('append-env.mjs'), file, `block=${KEY0}`]);
    await waitFor('the first child to start', () => existsSync(`${file}.blocked`));
    const next = await run(HOUR1, ['--on-busy', 'replace'], [fixture('exit-with.mjs'), '0']);
    expect(next.exitCode, next.all).toBe(0);
    const old = await holder;
    expect(old.exitCode, old.all).toBe(75);
    expect(await kinds(job, KEY0)).toContain('window-replaced');

    const again = await run(HOUR0, [], [fixture('append-env.mjs'), file]);
    expect(again.exitCode, again.all).toBe(0);
    expect(starts(file).map((s) => s.LEASEJOB_ATTEMPT)).toEqual(['1']);
    expect(await kinds(job, KEY0)).toContain('exhausted-skip');

    const check = await runCli(['check', ...conn(), '--name', job], noDb);
    expect(check.exitCode, check.all).toBe(2);
    expect(check.stdout).toMatch(
      new RegExp(`^CRITICAL ${job}: exhausted: window ${KEY0} failed all 1 of its attempts`, 'm'),
    );
    const occ = await runCli(['history', ...conn(), '--name', job, '--by-occurrence', '--json'], noDb);
    const mine = (JSON.parse(occ.stdout) as Array<{ window: string; reason: string }>).find((o) => o.window === KEY0);
    expect(mine?.reason, occ.stdout).toBe('exhausted');
  });

  it('--max-attempts 1: a holder SIGKILLed mid-run, then `leasejob release`: the attempt is lost and counted, the next trigger skips it', async () => {
    const job = `lc-release-${tag}`;
    const file = path.join(tmp, `${job}.jsonl`);
    const args = ['run', ...conn(), '--name', job, '--window', 'w1', '--max-attempts', '1', '--ttl', HOLDER_TTL];
    const holder = startCli([...args, '--', process.execPath, fixture('append-env.mjs'), file, 'block=w1'], noDb);
    const child = await waitFor('the child to start', () => readPidFile(`${file}.blocked`));
    holder.kill('SIGKILL');
    await holder;
    // The parent-death signal takes the child down with its runner.
    await waitFor('the child to die with its runner', () => !isAlive(child), 10_000);

    const release = await runCli(['release', ...conn(), '--name', job, '--force'], noDb);
    expect(release.exitCode, release.all).toBe(0);
    expect(await kinds(job, 'w1')).toContain('released');

    const again = await runCli([...args, '--', process.execPath, fixture('append-env.mjs'), file], noDb);
    expect(again.exitCode, again.all).toBe(0);
    expect(starts(file).map((s) => s.LEASEJOB_ATTEMPT)).toEqual(['1']);
    expect(await kinds(job, 'w1')).toContain('exhausted-skip');
    const check = await runCli(['check', ...conn(), '--name', job], noDb);
    expect(check.exitCode, check.all).toBe(2);
    expect(check.stdout).toMatch(
      new RegExp(`^CRITICAL ${job}: exhausted: window w1 failed all 1 of its attempts`, 'm'),
    );
  });

  it('--retry-delay: a crashed holder taken over by a retried trigger of the same occurrence starts its child (no backoff after a lost attempt)', async () => {
    const job = `lc-takeover-${tag}`;
    const file = path.join(tmp, `${job}.jsonl`);
    // A short TTL: the retried trigger waits out the dead holder's lease before it takes over.
    const args = ['run', ...conn(), '--name', job, '--window', 'w1', '--max-attempts', '3', '--retry-delay', '1h'];
    const holder = startCli(
      [...args, '--ttl', '3s', '--', process.execPath, fixture('append-env.mjs'), file, 'block=w1'],
      noDb,
    );
    const child = await waitFor('the child to start', () => readPidFile(`${file}.blocked`));
    holder.kill('SIGKILL');
    await holder;
    await waitFor('the child to die with its runner', () => !isAlive(child), 10_000);

    const retry = await runCli([...args, '--ttl', '3s', '--', process.execPath, fixture('append-env.mjs'), file], noDb);
    expect(retry.exitCode, retry.all).toBe(0);
    expect(starts(file).map((s) => s.LEASEJOB_ATTEMPT)).toEqual(['1', '2']);
    const events = await kinds(job, 'w1');
    expect(events).not.toContain('backoff-skip');
    expect(events).toContain('window-completed');
  });

  it("a schedule change (hourly :00 to :30) does not page for the new schedule's occurrences before it", async () => {
    const job = `lc-hourly-${tag}`;
    const top = latestTick(HOUR_MS, 0);
    const sched = (cron: string) => ['--name', job, '--schedule', cron, '--window-from-schedule', '--tz', 'UTC'];
    for (const at of [top - 3 * HOUR_MS, top - 2 * HOUR_MS, top - HOUR_MS, top]) {
      const r = await runCli(
        [
          'run',
          ...conn(),
          ...sched('0 * * * *'),
          '--alert-after',
          '1s',
          '--scheduled-time',
          iso(at),
          '--',
          process.execPath,
          fixture('exit-with.mjs'),
          '0',
        ],
        noDb,
      );
      expect(r.exitCode, r.all).toBe(0);
    }
    await registeredAt(job, top - 3 * HOUR_MS - 1_000);
    const half = latestTick(HOUR_MS, 30 * 60_000);
    const moved = await runCli(
      [
        'run',
        ...conn(),
        ...sched('30 * * * *'),
        '--alert-after',
        '1s',
        '--scheduled-time',
        iso(half),
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      noDb,
    );
    expect(moved.exitCode, moved.all).toBe(0);

    const check = await runCli(['check', ...conn(), '--name', job], noDb);
    expect(check.exitCode, check.all).toBe(0);
    expect(check.stdout).not.toContain('not completed');
    const status = JSON.parse((await runCli(['status', ...conn(), '--name', job, '--json'], noDb)).stdout);
    expect(status.jobs[0]).toMatchObject({ notCompleted: [], overdue: false });
    const text = await scrapeOnce(conn(), noDb, { timeoutMs: 120_000 });
    // Absent or 0: no due occurrence is missing.
    expect(metric(text, 'leasejob_due_occurrences_not_completed', `job="${job}"`) ?? 0).toBe(0);
  });

  it('a schedule change (daily 02:00 to 03:00) does not page for the days before it', async () => {
    const job = `lc-daily-${tag}`;
    const two = latestTick(DAY_MS, 2 * HOUR_MS);
    const sched = (cron: string) => ['--name', job, '--schedule', cron, '--window-from-schedule', '--tz', 'UTC'];
    for (const at of [two - 2 * DAY_MS, two - DAY_MS, two]) {
      const r = await runCli(
        [
          'run',
          ...conn(),
          ...sched('0 2 * * *'),
          '--alert-after',
          '1s',
          '--scheduled-time',
          iso(at),
          '--',
          process.execPath,
          fixture('exit-with.mjs'),
          '0',
        ],
        noDb,
      );
      expect(r.exitCode, r.all).toBe(0);
    }
    await registeredAt(job, two - 2 * DAY_MS - 1_000);
    const three = latestTick(DAY_MS, 3 * HOUR_MS);
    const moved = await runCli(
      [
        'run',
        ...conn(),
        ...sched('0 3 * * *'),
        '--alert-after',
        '1s',
        '--scheduled-time',
        iso(three),
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      noDb,
    );
    expect(moved.exitCode, moved.all).toBe(0);

    const check = await runCli(['check', ...conn(), '--name', job], noDb);
    expect(check.exitCode, check.all).toBe(0);
    const text = await scrapeOnce(conn(), noDb, { timeoutMs: 120_000 });
    // Absent or 0: no due occurrence is missing.
    expect(metric(text, 'leasejob_due_occurrences_not_completed', `job="${job}"`) ?? 0).toBe(0);
    // The old schedule's occurrences keep their rows.
    const occ = await runCli(['history', ...conn(), '--name', job, '--by-occurrence', '--json'], noDb);
    const reasons = (JSON.parse(occ.stdout) as Array<{ window: string; reason: string }>).map((o) => o.reason);
    expect(reasons.filter((r) => r === 'completed')).toHaveLength(4);
  });
});
