// `run --catch-up` end to end on both stores: real CLI, a real child that appends its
// environment to a file, "now" placed with --scheduled-time.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-catch-up-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

const FIVE_MIN = 5 * 60_000;
/** Five-minute ticks: T(4) is the latest tick at least five minutes old, T(0) twenty minutes before it. */
const T4 = Math.floor(Date.now() / FIVE_MIN) * FIVE_MIN - FIVE_MIN;
const T = (i: number): string => new Date(T4 - (4 - i) * FIVE_MIN).toISOString().replace('.000Z', 'Z');
const SCHEDULE = ['--schedule', '*/5 * * * *', '--window-from-schedule'];

interface StoreUnderTest {
  args(): string[];
  /** Say the job was first registered at `at` (as if it had been set up then). */
  registeredAt(job: string, at: string): Promise<void>;
  windows(job: string): Promise<Array<{ key: string; outcome: string; attempts: number; done: boolean }>>;
}

const stateFile = path.join(tmp, 'state.db');
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
          await db.rows<{ window_key: string; outcome: string; attempts: number; completed_at: Date | null }>(
            `SELECT window_key, outcome, attempts, completed_at FROM ${db.schema}.windows WHERE job = $1 ORDER BY window_key`,
            [job],
          )
        ).map((r) => ({ key: r.window_key, outcome: r.outcome, attempts: r.attempts, done: r.completed_at !== null })),
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
          .prepare('SELECT window_key, outcome, attempts, completed_at FROM windows WHERE job = ? ORDER BY window_key')
          .all(job) as Array<{ window_key: string; outcome: string; attempts: number; completed_at: number | null }>;
        s.close();
        return rows.map((r) => ({
          key: r.window_key,
          outcome: r.outcome,
          attempts: r.attempts,
          done: r.completed_at !== null,
        }));
      },
    },
  ],
];

const envLines = (file: string): Array<Record<string, string>> => {
  try {
    return readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, string>);
  } catch {
    return [];
  }
};

describe.each(stores)('run --catch-up: %s', (kind, store) => {
  const run = (job: string, at: number, extra: string[], out: string, mode = '') =>
    runCli([
      'run',
      ...store.args(),
      '--name',
      job,
      ...SCHEDULE,
      '--scheduled-time',
      T(at),
      ...extra,
      '--',
      process.execPath,
      fixture('append-env.mjs'),
      out,
      ...(mode ? [mode] : []),
    ]);
  /** A job that ran T(0) and was registered then; then nothing until T(4). */
  const downSinceT0 = async (job: string): Promise<string> => {
    const out = path.join(tmp, `${kind}-${job}.jsonl`);
    const first = await run(job, 0, [], out);
    expect(first.exitCode, first.all).toBe(0);
    await store.registeredAt(job, T(0));
    return out;
  };

  it('a job down for 3 schedule periods catches them up in order, each its own window, key and attempt, under one lease, then runs this one', async () => {
    const out = await downSinceT0('down3');
    const r = await run('down3', 4, ['--catch-up', '1h'], out);
    expect(r.exitCode, r.all).toBe(0);
    const lines = envLines(out);
    expect(lines.map((l) => l.LEASEJOB_SCHEDULED_AT)).toEqual([0, 1, 2, 3, 4].map((i) => new Date(T(i)).toISOString()));
    expect(lines.map((l) => l.IDEMPOTENCY_KEY)).toEqual([0, 1, 2, 3, 4].map((i) => `down3:${T(i)}`));
    expect(new Set(lines.map((l) => l.IDEMPOTENCY_KEY)).size).toBe(5);
    expect(lines.every((l) => l.LEASEJOB_ATTEMPT === '1')).toBe(true);
    // One lease for the whole catch-up: one fencing token for T(1)..T(4).
    expect(new Set(lines.slice(1).map((l) => l.FENCE_TOKEN)).size).toBe(1);
    expect(lines[1]!.FENCE_TOKEN).not.toBe(lines[0]!.FENCE_TOKEN);
    expect((await store.windows('down3')).map((w) => [w.key, w.outcome, w.done])).toEqual(
      [0, 1, 2, 3, 4].map((i) => [T(i), 'completed', true]),
    );

    // Nothing left: the next occurrence runs alone; occurrences from before registration are never run.
    const next = await run('down3', 4, ['--catch-up', '1h', '--rerun'], out);
    expect(next.exitCode, next.all).toBe(0);
    expect(envLines(out)).toHaveLength(6);
  });

  it('with --record-output each caught-up window keeps its own output, shown by history', async () => {
    await downSinceT0('rec');
    const r = await runCli([
      'run',
      ...store.args(),
      '--name',
      'rec',
      ...SCHEDULE,
      '--scheduled-time',
      T(3),
      '--catch-up',
      '1h',
      '--record-output',
      '--log-level',
      'error',
      '--',
      'sh',
      '-c',
      'echo "out $LEASEJOB_WINDOW"',
    ]);
    expect(r.exitCode, r.all).toBe(0);
    const h = await runCli(['history', ...store.args(), '--name', 'rec', '--json']);
    const ends = (JSON.parse(h.stdout) as Array<{ kind: string; window: string; output?: { tail: string } }>).filter(
      (e) => e.kind === 'window-completed' && e.output,
    );
    expect(ends.length).toBeGreaterThanOrEqual(3);
    for (const e of ends) expect(e.output!.tail).toBe(`out ${e.window}\n`);
  });

  it('--catch-up-limit runs the newest earlier windows and records the older ones as missed, saying how many and why', async () => {
    const out = await downSinceT0('limited');
    const r = await run('limited', 4, ['--catch-up', '1h', '--catch-up-limit', '2'], out);
    expect(r.exitCode, r.all).toBe(0);
    expect(
      envLines(out)
        .slice(1)
        .map((l) => l.LEASEJOB_WINDOW),
    ).toEqual([T(2), T(3), T(4)]);
    const said = logLines(r.stderr).find((l) => l.msg === 'occurrences beyond --catch-up-limit recorded as missed');
    expect(said, r.stderr).toMatchObject({
      count: 1,
      reason: 'catch-up-limit',
      oldest: T(1),
      newest: T(1),
      catchUpLimit: 2,
    });
    expect((await store.windows('limited')).find((w) => w.key === T(1))).toMatchObject({
      outcome: 'missed',
      done: false,
    });
    // A missed occurrence is not caught up later.
    const again = await run('limited', 4, ['--catch-up', '1h', '--rerun'], out);
    expect(again.exitCode, again.all).toBe(0);
    expect(
      envLines(out)
        .slice(4)
        .map((l) => l.LEASEJOB_WINDOW),
    ).toEqual([T(4)]);
  });

  it('occurrences older than --max-delay are recorded as missed, not run, and said so', async () => {
    const out = await downSinceT0('delayed');
    // T(1) is older than the max delay; T(2), T(3) and T(4) are not (2.5 minutes either side).
    const maxDelayMs = Date.now() - Date.parse(T(2)) + 150_000;
    const r = await run('delayed', 4, ['--catch-up', '1h', '--max-delay', `${Math.round(maxDelayMs / 1000)}s`], out);
    expect(r.exitCode, r.all).toBe(0);
    expect(
      envLines(out)
        .slice(1)
        .map((l) => l.LEASEJOB_WINDOW),
    ).toEqual([T(2), T(3), T(4)]);
    const said = logLines(r.stderr).find((l) => l.msg === 'occurrences older than --max-delay recorded as missed');
    expect(said, r.stderr).toMatchObject({ count: 1, reason: 'max-delay', oldest: T(1), newest: T(1) });
    expect((await store.windows('delayed')).find((w) => w.key === T(1))).toMatchObject({
      outcome: 'missed',
      attempts: 0,
    });
  });

  it("a failing catch-up stops the sequence with the child's exit code; the later windows stay open for the next run", async () => {
    const out = await downSinceT0('failing');
    const r = await run('failing', 4, ['--catch-up', '1h'], out, `fail=7=${T(2)}`);
    expect(r.exitCode, r.all).toBe(7);
    expect(
      envLines(out)
        .slice(1)
        .map((l) => l.LEASEJOB_WINDOW),
    ).toEqual([T(1), T(2)]);
    const windows = await store.windows('failing');
    expect(windows.map((w) => [w.key, w.outcome])).toEqual([
      [T(0), 'completed'],
      [T(1), 'completed'],
      [T(2), 'failed'],
    ]);
    expect(
      logLines(r.stderr).some(
        (l) => l.msg === 'a window failed: the later windows stay open for the next run' && l.left === 2,
      ),
    ).toBe(true);

    // The next trigger picks up where it stopped: T(2) as attempt 2, then T(3), then its own.
    const retry = await run('failing', 4, ['--catch-up', '1h'], out);
    expect(retry.exitCode, retry.all).toBe(0);
    const after = envLines(out).slice(3);
    expect(after.map((l) => [l.LEASEJOB_WINDOW, l.LEASEJOB_ATTEMPT])).toEqual([
      [T(2), '2'],
      [T(3), '1'],
      [T(4), '1'],
    ]);
    expect((await store.windows('failing')).every((w) => w.done)).toBe(true);
  });

  it('SIGTERM during a catch-up stops the current child as run does: exit 143, the rest stay open, the lease released', async () => {
    const out = await downSinceT0('term');
    const p = startCli([
      'run',
      ...store.args(),
      '--name',
      'term',
      ...SCHEDULE,
      '--scheduled-time',
      T(4),
      '--catch-up',
      '1h',
      '--kill-grace',
      '2s',
      '--',
      process.execPath,
      fixture('append-env.mjs'),
      out,
      `block=${T(2)}`,
    ]);
    await waitFor('the second catch-up child', () => existsSync(`${out}.blocked`));
    p.kill('SIGTERM');
    const r = await p;
    expect(r.exitCode, r.all).toBe(143);
    expect((await store.windows('term')).map((w) => [w.key, w.outcome])).toEqual([
      [T(0), 'completed'],
      [T(1), 'completed'],
      [T(2), 'failed'],
    ]);
    // The next run takes over at once (released, not left to expire) and resumes.
    const next = await run('term', 4, ['--catch-up', '1h'], out);
    expect(next.exitCode, next.all).toBe(0);
    expect(
      envLines(out)
        .slice(3)
        .map((l) => l.LEASEJOB_WINDOW),
    ).toEqual([T(2), T(3), T(4)]);
    expect(logLines(next.stderr).some((l) => l.msg === 'lease held by a stale owner, waiting for expiry')).toBe(false);
  });

  it('a --window-format coarser than the schedule counts distinct windows: one run for an hour of five-minute ticks', async () => {
    const job = 'coarse';
    const fmt = ['--window-format', "yyyy-MM-dd'T'HH"];
    const out = path.join(tmp, `${kind}-${job}.jsonl`);
    const hour = (at: number): string => new Date(at).toISOString().slice(0, 13);
    // Registered two hours before T(4), never run since: the two earlier hours are caught up once each.
    const first = await run(job, 4, fmt, out, `fail=3=${hour(T4)}`);
    expect(first.exitCode, first.all).toBe(3);
    await store.registeredAt(job, new Date(Math.floor(T4 / 3_600_000) * 3_600_000 - 2 * 3_600_000).toISOString());
    const r = await run(job, 4, [...fmt, '--catch-up', '3h'], out);
    expect(r.exitCode, r.all).toBe(0);
    const ran = envLines(out)
      .slice(1)
      .map((l) => l.LEASEJOB_WINDOW);
    const h = Math.floor(T4 / 3_600_000) * 3_600_000;
    expect(ran).toEqual([hour(h - 2 * 3_600_000), hour(h - 3_600_000), hour(T4)]);
    // Each earlier hour is dated by its last five-minute tick.
    expect(envLines(out)[1]!.LEASEJOB_SCHEDULED_AT).toBe(new Date(h - 3_600_000 - FIVE_MIN).toISOString());
  });

  it('refuses --catch-up without --window-from-schedule, a bad limit, or a span too long to walk: exit 64, nothing written', async () => {
    const cases: string[][] = [
      ['--name', 'bad-cu', '--window', 'w', '--catch-up', '1h'],
      ['--name', 'bad-cu', '--schedule', '*/5 * * * *', '--window', 'w', '--catch-up', '1h'],
      ['--name', 'bad-cu', ...SCHEDULE, '--catch-up-limit', '3'],
      ['--name', 'bad-cu', ...SCHEDULE, '--catch-up', '1h', '--catch-up-limit', '0'],
      ['--name', 'bad-cu', ...SCHEDULE, '--catch-up', '1h', '--catch-up-limit', 'lots'],
      ['--name', 'bad-cu', ...SCHEDULE, '--catch-up', 'soon'],
      ['--name', 'bad-cu', '--schedule', '* * * * *', '--window-from-schedule', '--catch-up', '400d'],
    ];
    for (const args of cases) {
      const r = await runCli(['run', ...store.args(), ...args, '--', 'true']);
      expect(r.exitCode, `${args.join(' ')}\n${r.all}`).toBe(64);
      expect(r.stderr).toMatch(/catch-up/);
    }
    expect(await store.windows('bad-cu')).toEqual([]);
  });
});
