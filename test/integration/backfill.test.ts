// `leasejob backfill` end to end on both stores: real CLI, a real child that appends its
// environment to a file.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, fixture, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-backfill-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

const HOUR = 3_600_000;
const H0 = Math.floor(Date.now() / HOUR) * HOUR - 6 * HOUR;
/** Hourly occurrences: W(0) six hours ago (at least), W(3) three hours later. */
const W = (i: number): string => new Date(H0 + i * HOUR).toISOString().replace('.000Z', 'Z');
const RANGE = ['--schedule', '0 * * * *', '--from', W(0), '--to', W(3)];

interface StoreUnderTest {
  args(): string[];
  windows(job: string): Promise<Array<{ key: string; outcome: string; attempts: number; done: boolean }>>;
  events(job: string): Promise<number>;
  lease(job: string): Promise<{ released: boolean } | undefined>;
}

const stateFile = path.join(tmp, 'state.db');
const sqlite = <T>(fn: (s: Database.Database) => T): T | undefined => {
  if (!existsSync(stateFile)) return undefined;
  const s = new Database(stateFile, { readonly: true });
  try {
    return fn(s);
  } finally {
    s.close();
  }
};
const stores: Array<[string, StoreUnderTest]> = [
  [
    'postgresql',
    {
      args: () => ['--database-url', db.url, '--schema', db.schema],
      windows: async (job) =>
        (
          await db.rows<{ window_key: string; outcome: string; attempts: number; completed_at: Date | null }>(
            `SELECT window_key, outcome, attempts, completed_at FROM ${db.schema}.windows WHERE job = $1 ORDER BY window_key`,
            [job],
          )
        ).map((r) => ({ key: r.window_key, outcome: r.outcome, attempts: r.attempts, done: r.completed_at !== null })),
      events: async (job) => (await db.rows(`SELECT 1 FROM ${db.schema}.events WHERE job = $1`, [job])).length,
      lease: async (job) => {
        const r = await db.rows<{ released_at: Date | null }>(
          `SELECT released_at FROM ${db.schema}.leases WHERE name = $1`,
          [job],
        );
        return r[0] ? { released: r[0].released_at !== null } : undefined;
      },
    },
  ],
  [
    'sqlite',
    {
      args: () => ['--state-file', stateFile],
      windows: async (job) =>
        (
          (sqlite((s) =>
            s
              .prepare(
                'SELECT window_key, outcome, attempts, completed_at FROM windows WHERE job = ? ORDER BY window_key',
              )
              .all(job),
          ) as
            | Array<{ window_key: string; outcome: string; attempts: number; completed_at: number | null }>
            | undefined) ?? []
        ).map((r) => ({ key: r.window_key, outcome: r.outcome, attempts: r.attempts, done: r.completed_at !== null })),
      events: async (job) => sqlite((s) => s.prepare('SELECT 1 FROM events WHERE job = ?').all(job).length) ?? 0,
      lease: async (job) => {
        const r = sqlite((s) => s.prepare('SELECT released_at FROM leases WHERE name = ?').get(job)) as
          { released_at: number | null } | undefined;
        return r ? { released: r.released_at !== null } : undefined;
      },
    },
  ],
];

const envLines = (file: string): Array<Record<string, string>> =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, string>)
    : [];

describe.each(stores)('leasejob backfill: %s', (kind, store) => {
  const child = (out: string, mode = ''): string[] => [
    '--',
    process.execPath,
    fixture('append-env.mjs'),
    out,
    ...(mode ? [mode] : []),
  ];
  const backfill = (job: string, extra: string[], tail: string[] = []) =>
    runCli(['backfill', ...store.args(), '--name', job, ...RANGE, ...extra, ...tail]);

  it('--dry-run lists each occurrence and what it would do, writing nothing; a run stops at the first failure; the same command again resumes', async () => {
    const out = path.join(tmp, `${kind}-resume.jsonl`);
    const dry = await backfill('resume', ['--dry-run']);
    expect(dry.exitCode, dry.all).toBe(0);
    for (let i = 0; i < 4; i++) expect(dry.stdout).toMatch(new RegExp(`${W(i)}\\s+\\S+\\s+new\\s+run`));
    expect(dry.stdout).toContain('4 window(s) of resume: 4 to run');
    expect(await store.events('resume')).toBe(0);

    const failing = await backfill('resume', [], child(out, `fail=7=${W(2)}`));
    expect(failing.exitCode, failing.all).toBe(7);
    expect(envLines(out).map((l) => l.LEASEJOB_WINDOW)).toEqual([W(0), W(1), W(2)]);
    expect(new Set(envLines(out).map((l) => l.FENCE_TOKEN)).size).toBe(1);
    expect(envLines(out).map((l) => l.IDEMPOTENCY_KEY)).toEqual([0, 1, 2].map((i) => `resume:${W(i)}`));
    expect(await store.windows('resume')).toEqual([
      { key: W(0), outcome: 'completed', attempts: 1, done: true },
      { key: W(1), outcome: 'completed', attempts: 1, done: true },
      { key: W(2), outcome: 'failed', attempts: 1, done: false },
    ]);
    expect(failing.stdout).toContain('2 completed, 1 failed, 2 left open');
    // Not a terminal: one progress line per occurrence.
    expect(
      logLines(failing.stderr)
        .filter((l) => l.msg === 'backfill progress')
        .map((l) => [l.done, l.total, l.window, l.outcome]),
    ).toEqual([
      [1, 4, W(0), 'completed'],
      [2, 4, W(1), 'completed'],
      [3, 4, W(2), 'failed'],
    ]);
    expect(await store.lease('resume')).toEqual({ released: true });

    const again = await backfill('resume', ['--dry-run']);
    expect(again.stdout).toMatch(new RegExp(`${W(1)}\\s+\\S+\\s+completed \\(attempt 1\\)\\s+skip`));
    expect(again.stdout).toMatch(new RegExp(`${W(2)}\\s+\\S+\\s+failed \\(attempt 1\\)\\s+run`));

    const resumed = await backfill('resume', [], child(out));
    expect(resumed.exitCode, resumed.all).toBe(0);
    expect(
      envLines(out)
        .slice(3)
        .map((l) => [l.LEASEJOB_WINDOW, l.LEASEJOB_ATTEMPT]),
    ).toEqual([
      [W(2), '2'],
      [W(3), '1'],
    ]);
    expect((await store.windows('resume')).every((w) => w.done)).toBe(true);
    const done = await backfill('resume', [], child(out));
    expect(done.exitCode, done.all).toBe(0);
    expect(done.stdout).toContain('nothing to run');
    expect(envLines(out)).toHaveLength(5);
  });

  it("--keep-going runs the rest after a failure and exits with the failed child's code", async () => {
    const out = path.join(tmp, `${kind}-keep.jsonl`);
    const r = await backfill('keep', ['--keep-going'], child(out, `fail=5=${W(1)}`));
    expect(r.exitCode, r.all).toBe(5);
    expect(envLines(out).map((l) => l.LEASEJOB_WINDOW)).toEqual([W(0), W(1), W(2), W(3)]);
    expect((await store.windows('keep')).map((w) => w.outcome)).toEqual([
      'completed',
      'failed',
      'completed',
      'completed',
    ]);
  });

  it('SIGTERM during a backfill stops the current child as run does and leaves the rest open', async () => {
    const out = path.join(tmp, `${kind}-term.jsonl`);
    const p = startCli([
      'backfill',
      ...store.args(),
      '--name',
      'term',
      ...RANGE,
      '--kill-grace',
      '2s',
      ...child(out, `block=${W(1)}`),
    ]);
    await waitFor("the second window's child", () => existsSync(`${out}.blocked`));
    p.kill('SIGTERM');
    const r = await p;
    expect(r.exitCode, r.all).toBe(143);
    expect(await store.windows('term')).toEqual([
      { key: W(0), outcome: 'completed', attempts: 1, done: true },
      { key: W(1), outcome: 'failed', attempts: 1, done: false },
    ]);
    expect(await store.lease('term')).toEqual({ released: true });
    expect(r.stdout).toContain('stopped by SIGTERM');
    // Said as a stop, not as a failure of the window.
    const msgs = logLines(r.stderr).map((l) => l.msg);
    expect(
      logLines(r.stderr).find((l) => l.msg === 'stopped: the later windows stay open for the next run'),
      r.stderr,
    ).toMatchObject({ stoppedBy: 'cancelled', left: 2 });
    expect(msgs).not.toContain('a window failed: the later windows stay open for the next run');
  });

  it('refuses bad input with exit 64 and writes nothing', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['--schedule', '0 * * * *', '--from', W(3), '--to', W(0)], /backwards/],
      [
        ['--schedule', '0 * * * *', '--from', W(0), '--to', new Date(Date.now() + 2 * HOUR).toISOString()],
        /no later than now/,
      ],
      [['--schedule', '* * * * *', '--from', '2020-01-01T00:00:00Z', '--to', 'now'], /narrow it/],
      [['--schedule', '* * * * *', '--from', W(0), '--to', 'now', '--max-windows', '10'], /more than 10 windows/],
      [['--schedule', '0 * * * *', '--from', '2026-01-01T10:10:00Z', '--to', '2026-01-01T10:20:00Z'], /no occurrence/],
      [['--from', W(0), '--to', W(3)], /needs `--schedule`/],
      [['--schedule', '0 * * * *', '--to', W(3)], /needs `--from` and `--to`/],
      [['--schedule', '0 * * * *', '--from', 'yesterday', '--to', W(3)], /Expected `--from`/],
      [[...RANGE, '--max-windows', '0'], /--max-windows/],
      [[...RANGE, '--catch-up', '1h'], /catch-up/],
    ];
    for (const [args, message] of cases) {
      const r = await runCli(['backfill', ...store.args(), '--name', 'bad-bf', ...args, '--', 'true']);
      expect(r.exitCode, `${args.join(' ')}\n${r.all}`).toBe(64);
      expect(r.stderr).toMatch(message);
    }
    const noCommand = await runCli(['backfill', ...store.args(), '--name', 'bad-bf', ...RANGE]);
    expect(noCommand.exitCode, noCommand.all).toBe(64);
    expect(await store.events('bad-bf')).toBe(0);
  });
});

// util-linux `script` gives the backfill a terminal (bsdutils, essential on Debian).
const hasScript = spawnSync('script', ['--version']).status === 0;
describe('leasejob backfill on a terminal', () => {
  it.skipIf(!hasScript)(
    'shows one progress line rewritten in place: done/total, the window, elapsed, an estimate',
    () => {
      const state = path.join(tmp, 'tty.db');
      const cmd = [
        process.execPath,
        BIN,
        'backfill',
        '--state-file',
        state,
        '--name',
        'tty',
        ...RANGE,
        '--log-level',
        'warn',
        '--',
        'true',
      ]
        .map((a) => `'${a.replace(/'/g, "'\\''")}'`)
        .join(' ');
      const r = spawnSync('script', ['-qec', cmd, '/dev/null'], {
        encoding: 'utf8',
        env: { ...process.env, XDG_STATE_HOME: tmp },
        timeout: 60_000,
      });
      expect(r.status, r.stdout + r.stderr).toBe(0);
      // The terminal's erase-line sequence is what is being checked.
      // eslint-disable-next-line no-control-regex
      expect(r.stdout).toMatch(/\r\x1b\[Kbackfill 0\/4 {2}running \S+ {2}elapsed \d+s/);
      expect(r.stdout).toMatch(
        new RegExp(`\\r\\x1b\\[Kbackfill 4/4 {2}completed ${W(3)} {2}elapsed \\d+s {2}about 0s left`),
      );
      expect(r.stdout).not.toContain('backfill progress');
      expect(r.stdout).toContain('backfill tty: 4 completed, 0 failed, 0 left open.');
    },
  );
});
