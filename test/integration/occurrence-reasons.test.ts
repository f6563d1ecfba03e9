// Every occurrence accounted for, with a reason (issue 17): real CLI processes on both stores
// make occurrences end completed, failed with attempts left, exhausted, missed by --max-delay,
// skipped (paused, marked, busy), backfilled and caught up; `history --by-occurrence` says each
// one's reason, with the busy skips against the occurrence they skipped, per host, and
// `status --json` and the exporter count the same reasons.
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NO_DB_ENV } from '../helpers/both-stores.js';
import { fixture, runCli, scrapeOnce, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-reasons-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

const noDb = NO_DB_ENV;
const stateFile = path.join(tmp, 'leasejob.db');
/** Each store's connection flags, and how a test says the job was registered at `at` (catch-up runs only later ones). */
const stores: Array<[string, () => string[], (job: string, at: string) => Promise<void>]> = [
  [
    'PostgreSQL',
    () => ['--database-url', db.url, '--schema', db.schema],
    async (job, at) => {
      await db.rows(`UPDATE ${db.schema}.jobs SET created_at = $2 WHERE name = $1`, [job, at]);
    },
  ],
  [
    'the embedded store',
    () => ['--state-file', stateFile],
    async (job, at) => {
      const s = new Database(stateFile);
      s.prepare('UPDATE jobs SET created_at = ? WHERE name = ?').run(Date.parse(at), job);
      s.close();
    },
  ],
];

const FIVE_MIN = 5 * 60_000;
/** Five-minute ticks: T(10) is the latest tick at least five minutes old, T(0) 50 minutes before it. */
const T10 = Math.floor(Date.now() / FIVE_MIN) * FIVE_MIN - FIVE_MIN;
const T = (i: number): string => new Date(T10 - (10 - i) * FIVE_MIN).toISOString().replace('.000Z', 'Z');
const SCHEDULE = ['--schedule', '*/5 * * * *', '--window-from-schedule'];

interface Occurrence {
  window: string;
  reason: string;
  outcome: string | null;
  attempts: number;
  maxAttempts: number | null;
  skips: Record<string, Record<string, number>>;
}

describe.each(stores)('every occurrence accounted for, in %s', (store, conn, registeredAt) => {
  const job = `acct-${store === 'PostgreSQL' ? 'pg' : 'lite'}`;
  const run = (at: number, extra: string[], child: string[] = ['true'], node?: string) =>
    runCli(['run', ...conn(), '--name', job, ...SCHEDULE, '--scheduled-time', T(at), ...extra, '--', ...child], {
      ...noDb,
      LEASEJOB_NODE_NAME: node,
    });
  const fail = ['sh', '-c', 'exit 3'];

  it('history --by-occurrence gives each occurrence its final reason, busy skips per host', async () => {
    expect((await run(0, [])).exitCode).toBe(0);
    expect((await run(1, ['--max-delay', '60s'])).exitCode).toBe(0);
    expect((await run(2, ['--max-attempts', '2'], fail)).exitCode).toBe(3);
    expect((await run(3, ['--max-attempts', '1'], fail)).exitCode).toBe(3);
    expect((await runCli(['pause', ...conn(), '--name', job], noDb)).exitCode).toBe(0);
    expect((await run(4, [])).exitCode).toBe(0);
    expect((await runCli(['resume', ...conn(), '--name', job], noDb)).exitCode).toBe(0);
    const mark = await runCli(['mark', ...conn(), '--name', job, '--window', T(5), '--skipped'], noDb);
    expect(mark.exitCode, mark.all).toBe(0);

    // T(8)'s run holds the lease: a trigger of T(6) and a second one of T(8) skip as busy.
    const started = path.join(tmp, `${job}.started`);
    const release = path.join(tmp, `${job}.release`);
    const holder = run(
      8,
      [],
      ['sh', '-c', ': > "$0"; exec "$1" "$2" "$3"', started, process.execPath, fixture('wait-for-file.mjs'), release],
    );
    await waitFor('the holder to start its child', () => existsSync(started));
    // Each from its own node (the host a run records in Kubernetes).
    expect((await run(6, [], ['true'], 'node-a')).exitCode).toBe(0);
    expect((await run(8, [], ['true'], 'node-b')).exitCode).toBe(0);
    writeFileSync(release, '');
    expect((await holder).exitCode).toBe(0);

    const backfill = await runCli(
      ['backfill', ...conn(), '--name', job, ...SCHEDULE.slice(0, 2), '--from', T(7), '--to', T(7), '--', 'true'],
      noDb,
    );
    expect(backfill.exitCode, backfill.all).toBe(0);
    // T(10)'s run catches up T(9), which no run saw (once the job counts as registered before it).
    await registeredAt(job, T(0));
    expect((await run(10, ['--catch-up', '5m'])).exitCode).toBe(0);

    const r = await runCli(['history', ...conn(), '--name', job, '--by-occurrence', '--json'], noDb);
    expect(r.exitCode, r.all).toBe(0);
    const found = JSON.parse(r.stdout) as Occurrence[];
    const reasons = Object.fromEntries(found.map((o) => [o.window, o.reason]));
    expect(reasons).toEqual({
      [T(0)]: 'completed',
      [T(1)]: 'missed-max-delay',
      [T(2)]: 'failed',
      [T(3)]: 'exhausted',
      [T(4)]: 'skipped-paused',
      [T(5)]: 'skipped-marked',
      [T(6)]: 'skipped-busy',
      [T(7)]: 'backfilled',
      [T(8)]: 'completed',
      [T(9)]: 'caught-up',
      [T(10)]: 'completed',
    });
    // Newest scheduled first, T(6) too: it has no ledger row, and its busy skip says its time.
    expect(found.map((o) => o.window)).toEqual([10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0].map(T));
    const of = (i: number) => found.find((o) => o.window === T(i))!;
    expect(of(6)).toMatchObject({ outcome: null, skips: { 'busy-skip': { 'node-a': 1 } } });
    expect(new Date(String(of(6).scheduledAt)).toISOString()).toBe(new Date(T(6)).toISOString());
    expect(of(8)).toMatchObject({ outcome: 'completed', skips: { 'busy-skip': { 'node-b': 1 } } });
    expect(of(2)).toMatchObject({ attempts: 1, maxAttempts: 2 });
    expect(of(3)).toMatchObject({ attempts: 1, maxAttempts: 1 });

    const table = await runCli(['history', ...conn(), '--name', job, '--by-occurrence'], noDb);
    expect(table.exitCode, table.all).toBe(0);
    expect(table.stdout).toMatch(new RegExp(`${T(6)}\\s+\\S+\\s+skipped-busy\\s+-\\s+0\\s+\\S+\\s+busy-skip node-a×1`));
    expect(table.stdout).toMatch(new RegExp(`${T(3)}\\s+\\S+\\s+exhausted\\s+failed\\s+1/1`));

    // Counted once each by its final reason, the one history gives it: status --json and the
    // exporter agree with it (T(6), skipped busy before any row, included).
    const counts: Record<string, number> = {};
    for (const o of found) counts[o.reason] = (counts[o.reason] ?? 0) + 1;
    expect(counts).toEqual({
      completed: 3,
      'caught-up': 1,
      backfilled: 1,
      'missed-max-delay': 1,
      failed: 1,
      exhausted: 1,
      'skipped-paused': 1,
      'skipped-marked': 1,
      'skipped-busy': 1,
    });
    const status = await runCli(['status', ...conn(), '--name', job, '--json'], noDb);
    expect(status.exitCode, status.all).toBe(0);
    const jobs = (JSON.parse(status.stdout) as { jobs: Array<{ name: string; occurrences: object }> }).jobs;
    expect(jobs.find((j) => j.name === job)?.occurrences).toEqual(counts);
    const text = await scrapeOnce(conn(), noDb);
    const series = text
      .split('\n')
      .filter((l) => l.startsWith(`leasejob_occurrences{job="${job}",`))
      .map((l) => /reason="([^"]+)"\} (\d+)/.exec(l)!.slice(1));
    expect(Object.fromEntries(series.map(([r, n]) => [r, Number(n)]))).toEqual(counts);
    expect(text).toContain(`leasejob_busy_skips_total{job="${job}",host="node-a"} 1`);
    expect(text).toContain(`leasejob_busy_skips_total{job="${job}",host="node-b"} 1`);
  });

  it('--by-occurrence with --window, or a --limit past 1000, is refused with exit 64', async () => {
    const both = await runCli(['history', ...conn(), '--name', job, '--by-occurrence', '--window', T(0)], noDb);
    expect(both.exitCode, both.all).toBe(64);
    const many = await runCli(['history', ...conn(), '--name', job, '--by-occurrence', '--limit', '1001'], noDb);
    expect(many.exitCode, many.all).toBe(64);
  });
});
