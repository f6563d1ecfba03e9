// Day-2 commands together, through the real CLI on both stores: catch-up and backfill of a
// paused job, a window marked by hand then backfilled over, the exporter's paused-skip count.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, scrapeOnce } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-paused-seq-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

const FIVE_MIN = 5 * 60_000;
/** Five-minute ticks: T(4) is the latest tick at least five minutes old. */
const T4 = Math.floor(Date.now() / FIVE_MIN) * FIVE_MIN - FIVE_MIN;
const T = (i: number): string => new Date(T4 - (4 - i) * FIVE_MIN).toISOString().replace('.000Z', 'Z');
const SCHEDULE = ['--schedule', '*/5 * * * *'];

const noDb = {
  DATABASE_URL: undefined,
  LEASEJOB_DATABASE_URL: undefined,
  PGHOST: undefined,
  PGPORT: undefined,
  PGDATABASE: undefined,
  PGUSER: undefined,
  PGPASSWORD: undefined,
};
const stateFile = path.join(tmp, 'state.db');
interface StoreUnderTest {
  args(): string[];
  registeredAt(job: string, at: string): Promise<void>;
  windows(job: string): Promise<Array<{ key: string; outcome: string; done: boolean }>>;
}
const stores: Array<[string, StoreUnderTest]> = [
  [
    'postgresql',
    {
      args: () => ['--database-url', db.url, '--schema', db.schema],
      registeredAt: async (job, at) => {
        await db.rows(`UPDATE ${db.schema}.jobs SET created_at = $2 WHERE name = $1`, [job, at]);
      },
      windows: async (job) =>
        (
          await db.rows<{ window_key: string; outcome: string; completed_at: Date | null }>(
            `SELECT window_key, outcome, completed_at FROM ${db.schema}.windows WHERE job = $1 ORDER BY window_key`,
            [job],
          )
        ).map((r) => ({ key: r.window_key, outcome: r.outcome, done: r.completed_at !== null })),
    },
  ],
  [
    'sqlite',
    {
      args: () => ['--state-file', stateFile],
      registeredAt: async (job, at) => {
        const s = new Database(stateFile);
        s.prepare('UPDATE jobs SET created_at = ? WHERE name = ?').run(Date.parse(at), job);
        s.close();
      },
      windows: async (job) => {
        const s = new Database(stateFile, { readonly: true });
        const rows = s
          .prepare('SELECT window_key, outcome, completed_at FROM windows WHERE job = ? ORDER BY window_key')
          .all(job) as Array<{ window_key: string; outcome: string; completed_at: number | null }>;
        s.close();
        return rows.map((r) => ({ key: r.window_key, outcome: r.outcome, done: r.completed_at !== null }));
      },
    },
  ],
];

/** A command that appends its window to a file: lines absent, it never started. */
const append = (file: string): string[] => [
  '--',
  process.execPath,
  '-e',
  `require('node:fs').appendFileSync(${JSON.stringify(file)}, process.env.LEASEJOB_WINDOW + '\\n')`,
];
const ran = (file: string): string[] =>
  existsSync(file) ? readFileSync(file, 'utf8').trim().split('\n').filter(Boolean) : [];

describe.each(stores)('paused jobs, catch-up and backfill: %s', (kind, store) => {
  const cli = (args: string[]) => runCli([args[0]!, ...store.args(), ...args.slice(1)], noDb);
  const n = (name: string): string => `${name}-${kind}`;
  /** A job that ran T(0) and was registered then; then nothing until T(4). */
  const downSinceT0 = async (job: string, out: string): Promise<void> => {
    const first = await cli([
      'run',
      '--name',
      job,
      ...SCHEDULE,
      '--window-from-schedule',
      '--scheduled-time',
      T(0),
      ...append(out),
    ]);
    expect(first.exitCode, first.all).toBe(0);
    await store.registeredAt(job, T(0));
  };

  it('run --catch-up of a paused job runs nothing, exits 0 and records its own occurrence as skipped (paused); the earlier ones stay open', async () => {
    const job = n('cu-paused');
    const out = path.join(tmp, `${job}.txt`);
    await downSinceT0(job, out);
    expect((await cli(['pause', '--name', job, '--reason', 'ledger migration'])).exitCode).toBe(0);
    const r = await cli([
      'run',
      '--name',
      job,
      ...SCHEDULE,
      '--window-from-schedule',
      '--scheduled-time',
      T(4),
      '--catch-up',
      '1h',
      ...append(out),
    ]);
    expect(r.exitCode, r.all).toBe(0);
    expect(ran(out)).toEqual([T(0)]);
    // As a run without --catch-up: its occurrence is final (skipped), so nothing calls it overdue.
    expect(await store.windows(job)).toEqual([
      { key: T(0), outcome: 'completed', done: true },
      { key: T(4), outcome: 'skipped', done: true },
    ]);
    const status = JSON.parse((await cli(['status', '--name', job, '--json'])).stdout).jobs[0];
    expect(status).toMatchObject({ paused: true, overdue: false });
    // One skip, one event, naming the window.
    const skips = (
      JSON.parse((await cli(['history', '--name', job, '--json'])).stdout) as Array<{
        kind: string;
        window: string | null;
      }>
    ).filter((e) => e.kind === 'paused-skip');
    expect(skips.map((e) => e.window)).toEqual([T(4)]);
    // Resumed, the next run catches up the earlier ones and not the paused one.
    expect((await cli(['resume', '--name', job])).exitCode).toBe(0);
    const after = await cli([
      'run',
      '--name',
      job,
      ...SCHEDULE,
      '--window-from-schedule',
      '--scheduled-time',
      T(4),
      '--catch-up',
      '1h',
      ...append(out),
    ]);
    expect(after.exitCode, after.all).toBe(0);
    expect(ran(out)).toEqual([T(0), T(1), T(2), T(3)]);
  });

  it('backfill of a paused job runs nothing, exits 0 and says the job is paused and what is left open', async () => {
    const job = n('bf-paused');
    const out = path.join(tmp, `${job}.txt`);
    await downSinceT0(job, out);
    expect((await cli(['pause', '--name', job, '--until', '2h', '--reason', 'quarter close'])).exitCode).toBe(0);
    const dry = await cli(['backfill', '--name', job, ...SCHEDULE, '--from', T(0), '--to', T(4), '--dry-run']);
    expect(dry.exitCode, dry.all).toBe(0);
    expect(dry.stdout).toMatch(
      /^The job is paused since \S+ by \S+@\S+ until \S+ \(quarter close\): a backfill now runs nothing \(`leasejob resume` first\)\.$/m,
    );
    const r = await cli(['backfill', '--name', job, ...SCHEDULE, '--from', T(0), '--to', T(4), ...append(out)]);
    expect(r.exitCode, r.all).toBe(0);
    expect(ran(out)).toEqual([T(0)]);
    expect(r.stdout).toContain(
      `backfill ${job}: 0 completed, 0 failed, 4 left open (the job is paused: nothing was run;`,
    );
    expect(logLines(r.stderr).map((l) => l.msg)).toContain(
      'job paused (leasejob pause): occurrence skipped, command not started',
    );
    // A backfill marks none of its range skipped: resumed, the same command runs them.
    expect((await store.windows(job)).map((w) => w.key)).toEqual([T(0)]);
    expect((await cli(['resume', '--name', job])).exitCode).toBe(0);
    const again = await cli(['backfill', '--name', job, ...SCHEDULE, '--from', T(0), '--to', T(4), ...append(out)]);
    expect(again.exitCode, again.all).toBe(0);
    expect(ran(out)).toEqual([T(0), T(1), T(2), T(3), T(4)]);
  });

  it('a window marked done or skipped by hand is skipped by backfill, and the dry run says it was marked, not run', async () => {
    const job = n('bf-marked');
    const out = path.join(tmp, `${job}.txt`);
    await downSinceT0(job, out);
    expect((await cli(['mark', '--name', job, '--window', T(2), '--done', '--reason', 'by hand'])).exitCode).toBe(0);
    expect((await cli(['mark', '--name', job, '--window', T(3), '--skipped'])).exitCode).toBe(0);
    const dry = await cli(['backfill', '--name', job, ...SCHEDULE, '--from', T(0), '--to', T(4), '--dry-run']);
    expect(dry.exitCode, dry.all).toBe(0);
    const rows = dry.stdout
      .split('\n')
      .filter((l) => l.startsWith('20'))
      .map((l) => l.split(/\s{2,}/));
    expect(rows.map((r) => [r[0], r[2], r[3]])).toEqual([
      [T(0), 'completed (attempt 1)', 'skip'],
      [T(1), 'new', 'run'],
      [T(2), 'completed (marked or paused)', 'skip'],
      [T(3), 'skipped (marked or paused)', 'skip'],
      [T(4), 'new', 'run'],
    ]);
    const r = await cli(['backfill', '--name', job, ...SCHEDULE, '--from', T(0), '--to', T(4), ...append(out)]);
    expect(r.exitCode, r.all).toBe(0);
    expect(ran(out)).toEqual([T(0), T(1), T(4)]);
  });
});

describe('pause --until bounds', () => {
  it('a duration out of range is told as such (exit 64, nothing written)', async () => {
    const conn = ['--database-url', db.url, '--schema', db.schema];
    expect(
      (
        await runCli([
          'run',
          '--name',
          'until-bounds',
          '--window',
          'w',
          ...conn,
          '--',
          process.execPath,
          fixture('exit-with.mjs'),
          '0',
        ])
      ).exitCode,
    ).toBe(0);
    const long = await runCli(['pause', '--name', 'until-bounds', '--until', '400d', ...conn]);
    expect(long.exitCode).toBe(64);
    expect(long.stderr).toMatch(/`--until` to be a duration of at most 366 days/);
    const zero = await runCli(['pause', '--name', 'until-bounds', '--until', '0s', ...conn]);
    expect(zero.exitCode).toBe(64);
    expect(zero.stderr).toMatch(/`--until` to be a positive duration/);
    const status = JSON.parse((await runCli(['status', '--name', 'until-bounds', '--json', ...conn])).stdout).jobs[0];
    expect(status).toMatchObject({ paused: false, version: 1 });
  });
});

describe('the exporter counts paused skips', () => {
  it('leasejob_paused_skips_total per job', async () => {
    const conn = ['--database-url', db.url, '--schema', db.schema];
    const job = 'exp-paused-skips';
    expect(
      (
        await runCli([
          'run',
          '--name',
          job,
          '--window',
          'w0',
          ...conn,
          '--',
          process.execPath,
          fixture('exit-with.mjs'),
          '0',
        ])
      ).exitCode,
    ).toBe(0);
    expect((await runCli(['pause', '--name', job, ...conn])).exitCode).toBe(0);
    for (const w of ['w1', 'w2']) {
      const r = await runCli([
        'run',
        '--name',
        job,
        '--window',
        w,
        ...conn,
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ]);
      expect(r.exitCode, r.all).toBe(0);
    }
    const text = await scrapeOnce(conn, {}, { timeoutMs: 120_000 });
    expect(text).toMatch(/^# TYPE leasejob_paused_skips_total counter$/m);
    expect(text).toMatch(new RegExp(`^leasejob_paused_skips_total\\{job="${job}"\\} 2$`, 'm'));
  });
});
