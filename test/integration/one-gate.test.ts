// One gate for every path that can start a child, decided in the store where the window is
// claimed: a pruned occurrence never runs again (catch-up, backfill, a coarse --window-format),
// a pause orders against an acquisition, a token of an earlier history claims nothing, a window
// marked by hand is no longer its stale holder's, and a prune never makes `check` report a
// completed occurrence as not run. Real CLI, real child, both stores where the case applies.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-one-gate-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

const MIN = 60_000;
const HOUR = 60 * MIN;
const DAY = 24 * HOUR;
const FIVE_MIN = 5 * MIN;
/** Five-minute ticks: T(4) is the latest tick at least five minutes old. */
const T4 = Math.floor(Date.now() / FIVE_MIN) * FIVE_MIN - FIVE_MIN;
const iso = (ms: number): string => new Date(ms).toISOString().replace('.000Z', 'Z');
const T = (i: number): string => iso(T4 - (4 - i) * FIVE_MIN);
const SCHEDULE = ['--schedule', '*/5 * * * *', '--window-from-schedule'];
/** `prune --older-than` that puts the horizon at `ms` (rounded down to the second: the horizon lands at or after it). */
const olderThanTo = (ms: number): string => `${Math.floor((Date.now() - ms) / 1000)}s`;

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
  env: Record<string, string | undefined>;
  registeredAt(job: string, at: string): Promise<void>;
  windows(job: string): Promise<Array<{ key: string; outcome: string; done: boolean }>>;
}

const stores: Array<[string, StoreUnderTest]> = [
  [
    'postgresql',
    {
      args: () => ['--database-url', db.url, '--schema', db.schema],
      env: {},
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
      env: noDb,
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

const envLines = (file: string): Array<Record<string, string>> =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, string>)
    : [];
/** How many times each window's child ran. */
const runsByWindow = (file: string): Record<string, number> => {
  const n: Record<string, number> = {};
  for (const l of envLines(file)) n[l.LEASEJOB_WINDOW!] = (n[l.LEASEJOB_WINDOW!] ?? 0) + 1;
  return n;
};

describe.each(stores)('one gate after prune: %s', (kind, store) => {
  const cli = (args: string[]) => runCli([...args.slice(0, 1), ...store.args(), ...args.slice(1)], store.env);
  const child = (out: string): string[] => ['--', process.execPath, fixture('append-env.mjs'), out];
  const runAt = (job: string, at: string, extra: string[], out: string, schedule = SCHEDULE) =>
    cli(['run', '--name', job, ...schedule, '--scheduled-time', at, ...extra, ...child(out)]);

  /** A job that completed T(0), T(1), T(2), then was pruned with the horizon between T(2) and T(3). */
  const prunedAfterT2 = async (job: string): Promise<string> => {
    const out = path.join(tmp, `${kind}-${job}.jsonl`);
    for (const i of [0, 1, 2]) {
      const r = await runAt(job, T(i), [], out);
      expect(r.exitCode, r.all).toBe(0);
    }
    await store.registeredAt(job, T(0));
    const p = await cli(['prune', '--name', job, '--older-than', olderThanTo(T4 - 2 * FIVE_MIN + FIVE_MIN / 2)]);
    expect(p.exitCode, p.all).toBe(0);
    // The latest completed window (T(2)) stays; T(0) and T(1) are gone.
    expect((await store.windows(job)).map((w) => w.key)).toEqual([T(2)]);
    return out;
  };

  it('run --catch-up does not run a pruned, completed occurrence again', async () => {
    const out = await prunedAfterT2('catch-pruned');
    const r = await runAt('catch-pruned', T(4), ['--catch-up', '1h'], out);
    expect(r.exitCode, r.all).toBe(0);
    // T(3) never ran and is after the horizon: caught up. T(0), T(1) ran once, before the prune.
    expect(runsByWindow(out)).toEqual({ [T(0)]: 1, [T(1)]: 1, [T(2)]: 1, [T(3)]: 1, [T(4)]: 1 });
  });

  it('backfill --dry-run shows pruned windows as pruned, and backfill does not run them', async () => {
    const out = await prunedAfterT2('backfill-pruned');
    const range = ['--schedule', '*/5 * * * *', '--from', T(0), '--to', T(3)];
    const dry = await cli(['backfill', '--name', 'backfill-pruned', ...range, '--dry-run', ...child(out)]);
    expect(dry.exitCode, dry.all).toBe(0);
    const line = (i: number): string => dry.stdout.split('\n').find((l) => l.includes(T(i)))!;
    for (const i of [0, 1]) expect(line(i)).toMatch(/pruned.*skip/);
    expect(line(3)).toMatch(/new\s+run/);
    const r = await cli(['backfill', '--name', 'backfill-pruned', ...range, ...child(out)]);
    expect(r.exitCode, r.all).toBe(0);
    expect(runsByWindow(out)).toEqual({ [T(0)]: 1, [T(1)]: 1, [T(2)]: 1, [T(3)]: 1 });
  });

  it('a late duplicate of a day whose first tick is before the horizon does not run it again (hourly ticks, yyyy-MM-dd windows)', async () => {
    const out = path.join(tmp, `${kind}-coarse.jsonl`);
    const day = Math.floor(Date.now() / DAY) * DAY - 3 * DAY;
    const hourly = ['--schedule', '0 * * * *', '--window-from-schedule', '--window-format', 'yyyy-MM-dd'];
    for (const at of [day, day + DAY]) {
      const r = await runAt('coarse', iso(at), [], out, hourly);
      expect(r.exitCode, r.all).toBe(0);
    }
    await store.registeredAt('coarse', iso(day));
    // The horizon lands at noon of the first day: that day's row goes (its first tick is older).
    const p = await cli(['prune', '--name', 'coarse', '--older-than', olderThanTo(day + 12 * HOUR)]);
    expect(p.exitCode, p.all).toBe(0);
    const late = await runAt('coarse', iso(day + 20 * HOUR), [], out, hourly);
    expect(late.exitCode, late.all).toBe(0);
    const key = iso(day).slice(0, 10);
    expect(runsByWindow(out)[key]).toBe(1);
  });

  it('after a prune shorter than the lookback, check does not report a completed-then-pruned occurrence as not run', async () => {
    const out = path.join(tmp, `${kind}-checked.jsonl`);
    const hour = Math.floor(Date.now() / HOUR) * HOUR;
    const hourly = ['--schedule', '0 * * * *', '--window-from-schedule', '--alert-after', '10m'];
    for (const h of [4, 3, 2, 1, 0]) {
      const r = await runAt('checked', iso(hour - h * HOUR), [], out, hourly);
      expect(r.exitCode, r.all).toBe(0);
    }
    await store.registeredAt('checked', iso(hour - 4 * HOUR));
    const before = await cli(['check', '--name', 'checked']);
    expect(before.exitCode, before.all).toBe(0);
    const p = await cli(['prune', '--name', 'checked', '--older-than', olderThanTo(hour - 90 * MIN)]);
    expect(p.exitCode, p.all).toBe(0);
    const after = await cli(['check', '--name', 'checked']);
    expect(after.stdout, after.all).not.toMatch(/no run/);
    expect(after.exitCode, after.all).toBe(0);
  });
});

describe('one gate: pause against acquire, tokens, marks (postgresql)', () => {
  const conn = (): string[] => ['--database-url', db.url, '--schema', db.schema];
  const s = (): string => `"${db.schema}"`;

  it('once pause has exited 0, a run that was already inside acquire starts no child', async () => {
    const out = path.join(tmp, 'pause-race.jsonl');
    const run = (at: string) =>
      [
        'run',
        ...conn(),
        '--name',
        'pause-race',
        ...SCHEDULE,
        '--scheduled-time',
        at,
        '--',
        process.execPath,
        fixture('append-env.mjs'),
        out,
      ] as string[];
    const first = await runCli(run(T(0)));
    expect(first.exitCode, first.all).toBe(0);
    // Held inside acquire, after whatever it read of the pause: the fence epoch's row records a
    // history other than the server's (as after a restore), so acquire must update it, and a
    // second connection holds that row until pause has had its chance.
    await db.rows(`UPDATE ${s()}.fence_epoch SET timeline = 0`);
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM ${s()}.fence_epoch FOR UPDATE`);
      const racer = startCli(run(T(1)));
      // Asked on another connection: inside a transaction, pg_stat_activity is a snapshot.
      const waiting = async (q: string): Promise<boolean> => {
        const rows = await db.rows<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE $1`,
          [`%${q}%`],
        );
        return rows[0]!.n > 0;
      };
      await waitFor('the run to wait inside acquire', () => waiting('.acquire'));
      const pause = startCli(['pause', ...conn(), '--name', 'pause-race', '--reason', 'race']);
      // Either pause is done, or it queues behind the acquisition it must be ordered with.
      let pauseDone = false;
      void pause.then(() => (pauseDone = true));
      await waitFor('pause to finish or queue', async () => pauseDone || (await waiting('pause_job(')));
      await holder.query('ROLLBACK');
      const p = await pause;
      expect(p.exitCode, p.all).toBe(0);
      const r = await racer;
      expect(r.exitCode, r.all).toBe(0);
    } finally {
      await holder.end();
    }
    // The job's log: no acquisition after the pause.
    const events = await db.rows<{ seq: string; kind: string }>(
      `SELECT seq, kind FROM ${s()}.events WHERE job = 'pause-race' AND kind IN ('acquired', 'stale-takeover', 'paused', 'window-claimed') ORDER BY seq`,
    );
    const pausedAt = events.findIndex((e) => e.kind === 'paused');
    expect(pausedAt, JSON.stringify(events)).toBeGreaterThan(0);
    expect(events.slice(pausedAt + 1), JSON.stringify(events)).toEqual([]);
    // And a child ran for T(1) only if its acquisition came before the pause.
    const acquired = events.slice(0, pausedAt).filter((e) => e.kind === 'acquired').length;
    expect(runsByWindow(out)[T(1)] ?? 0).toBe(acquired - 1);
  });

  it('claim_window and record_missed refuse a token of an earlier history (fence epoch)', async () => {
    const at = await db.rows<{ generation: string }>(
      `SELECT generation FROM ${s()}.acquire('epoch-claim', 'h:1:a', 60000, 20000, NULL, NULL, false, NULL, now(), '{}'::jsonb, 1000)`,
    );
    const gen = at[0]!.generation;
    // A failover or restore as fence_epoch() records one: the epoch moves on.
    await db.rows(`UPDATE ${s()}.fence_epoch SET epoch = epoch + 1`);
    const claim = await db.rows<{ outcome: string }>(
      `SELECT outcome FROM ${s()}.claim_window('epoch-claim', 'h:1:a', $1, 'w1', now(), false, NULL, now(), '{}'::jsonb)`,
      [gen],
    );
    expect(claim[0]!.outcome).toBe('not-held');
    const missed = await db.rows<{ n: number | null }>(
      `SELECT ${s()}.record_missed('epoch-claim', 'h:1:a', $1, ARRAY['w2'], ARRAY[now()], 'max-delay', now()) AS n`,
      [gen],
    );
    expect(missed[0]!.n).toBeNull();
    expect(
      await db.rows(`SELECT window_key FROM ${s()}.windows WHERE job = 'epoch-claim' AND window_key IN ('w1', 'w2')`),
    ).toEqual([]);
    await db.rows(`UPDATE ${s()}.fence_epoch SET epoch = epoch - 1`);
  });

  it("a window marked done by hand is no longer its stale holder's: finish_window('completed') is told it lost", async () => {
    const at = await db.rows<{ generation: string }>(
      `SELECT generation FROM ${s()}.acquire('mark-stale', 'h:1:a', 60000, 20000, NULL, NULL, false, NULL, now(), '{}'::jsonb, 1000)`,
    );
    const gen = at[0]!.generation;
    const claim = await db.rows<{ outcome: string }>(
      `SELECT outcome FROM ${s()}.claim_window('mark-stale', 'h:1:a', $1, 'w1', now(), false, NULL, now(), '{}'::jsonb)`,
      [gen],
    );
    expect(claim[0]!.outcome).toBe('claimed');
    // The holder stops renewing; an operator marks the window done.
    await db.rows(`UPDATE ${s()}.leases SET expires_at = now() - interval '1 minute' WHERE name = 'mark-stale'`);
    const m = await runCli([
      'mark',
      ...conn(),
      '--name',
      'mark-stale',
      '--window',
      'w1',
      '--done',
      '--reason',
      'by hand',
    ]);
    expect(m.exitCode, m.all).toBe(0);
    const fin = await db.rows<{ held: boolean }>(
      `SELECT held FROM ${s()}.finish_window('mark-stale', 'h:1:a', $1, 'w1', 'completed', 0, now(), '{}'::jsonb)`,
      [gen],
    );
    expect(fin[0]!.held).toBe(false);
  });
});
