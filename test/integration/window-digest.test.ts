// Issue 24: window_digest (migration 019) lets status, check and the exporter judge a job's due
// occurrences without reading its history. What they report must be exactly what the ledger
// says, after every kind of write: in order, out of order, failures, reruns, marks (ahead of
// time too), hand edits, prune's deletes, more final windows than the digest keeps, windows
// written with the triggers off. Each case is read three ways and compared: with the digest the
// triggers kept, with no digest (the ledger, as before 019), and with one rebuilt from the ledger.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readJobStates, type JobState } from '../../src/monitor/job-states.js';
import { resolveConnection } from '../../src/store/postgres/connection.js';
import { createPool, PgStore } from '../../src/store/postgres/store.js';
import { runCli } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';

let db: TestDb;
let store: PgStore;
let pool: ReturnType<typeof createPool>;
beforeAll(async () => {
  db = await testDb();
  pool = createPool(resolveConnection(db.url), { max: 4 });
  store = new PgStore(pool, db.schema, 'test');
});
afterAll(async () => {
  await pool.end();
  await db.close();
});

// Hourly jobs: the due set moves once an hour (at half past, the default grace), so the three
// reads of a comparison see the same due windows unless one straddles that instant (retried).
const HOUR = 3_600_000;
const BASE = Math.floor(Date.now() / HOUR) * HOUR;
const at = (hoursAgo: number): Date => new Date(BASE - hoursAgo * HOUR);
const key = (hoursAgo: number, suffix = 'Z'): string => at(hoursAgo).toISOString().replace('.000Z', suffix);

async function job(name: string, tz = 'UTC'): Promise<void> {
  await db.rows(
    `INSERT INTO ${db.schema}.jobs (name, schedule, tz, window_mode, ttl_ms, created_at)
     VALUES ($1, '0 * * * *', $2, 'schedule', 90000, now() - interval '200 hours')`,
    [name, tz],
  );
}

/** Windows of `name` for these hours ago: completed unless told, scheduled unless told. */
async function windows(
  name: string,
  hours: number[],
  opts: { outcome?: string; scheduled?: boolean; suffix?: string } = {},
): Promise<void> {
  const outcome = opts.outcome ?? 'completed';
  for (const h of hours)
    await db.rows(
      `INSERT INTO ${db.schema}.windows (job, window_key, scheduled_at, owner, generation, attempts, started_at,
                                         finished_at, completed_at, outcome)
       VALUES ($1, $2, $3, 'host:1:x', $4, 1, $5, $5, CASE WHEN $6 = 'completed' THEN $5::timestamptz END, $6)`,
      [
        name,
        key(h, opts.suffix),
        opts.scheduled === false ? null : at(h),
        1000 - h,
        new Date(at(h).getTime() + 5_000),
        outcome,
      ],
    );
}

const range = (from: number, to: number): number[] => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** What status, check and the exporter are told of each job, in a stable text. */
function judgement(jobs: JobState[]): string {
  return JSON.stringify(
    jobs.map((j) => ({
      name: j.name,
      lastWindow: j.lastWindow,
      lastCompletedAt: j.lastCompletedAt?.toISOString() ?? null,
      lastDurationMs: j.lastDurationMs,
      overdue: j.overdue,
      due: j.due ? { window: j.due.window, completed: j.due.completed } : null,
      count: j.notCompletedCount,
      notCompleted: j.notCompleted.map((o) => `${o.window} ${o.outcome}`),
    })),
    null,
    1,
  );
}

const s = (): string => db.schema;

/** The digest the triggers kept, no digest (the ledger's answer), and a rebuilt one: the same. */
async function threeWays(): Promise<{ kept: string; ledger: string; rebuilt: string }> {
  for (let attempt = 0; ; attempt++) {
    const kept = judgement((await readJobStates(store)).jobs);
    await db.rows(`CREATE TABLE ${s()}.digest_saved AS SELECT * FROM ${s()}.window_digest`);
    await db.rows(`DELETE FROM ${s()}.window_digest`);
    const ledger = judgement((await readJobStates(store)).jobs);
    await db.rows(`SELECT ${s()}.rebuild_window_digest()`);
    const rebuilt = judgement((await readJobStates(store)).jobs);
    await db.rows(`DELETE FROM ${s()}.window_digest`);
    await db.rows(`INSERT INTO ${s()}.window_digest SELECT * FROM ${s()}.digest_saved`);
    await db.rows(`DROP TABLE ${s()}.digest_saved`);
    const again = judgement((await readJobStates(store)).jobs);
    // The due set moved between the reads (half past an hour): read again.
    if (again !== kept && attempt < 3) continue;
    return { kept, ledger, rebuilt };
  }
}

async function digest(name: string): Promise<{ n: number; floor_ms: number; marks_full: boolean } | undefined> {
  const rows = await db.rows<{ n: number; floor_ms: number; marks_full: boolean }>(
    `SELECT (SELECT count(*) FROM jsonb_object_keys(finals))::int AS n, floor_ms, marks_full FROM ${s()}.window_digest WHERE job = $1`,
    [name],
  );
  return rows[0];
}

describe('window_digest (issue 24)', () => {
  it('status, check and the exporter hear from the digest exactly what the ledger says, after every kind of write', async () => {
    // Healthy for 100 hours: more final windows than the digest keeps (trimmed, its floor raised).
    await job('healthy');
    await windows('healthy', range(0, 99));
    // Gaps: failed, no run, a run whose owner is gone.
    await job('gaps');
    await windows('gaps', [0, 1, 2, 4, 6, 8, 10, ...range(12, 30)]);
    await windows('gaps', [3, 5], { outcome: 'failed' });
    await windows('gaps', [9], { outcome: 'running' });
    // Completed, then opened again (a rerun; the latest completion among them).
    await job('rerun');
    await windows('rerun', range(0, 30));
    await db.rows(
      `UPDATE ${s()}.windows SET completed_at = NULL, outcome = 'running' WHERE job = 'rerun' AND window_key = ANY($1)`,
      [[key(0), key(6)]],
    );
    // Marked by hand (no scheduled time), one ahead of its time.
    await job('marked');
    await windows('marked', [0, 1, 5, ...range(7, 30)]);
    for (const [h, outcome] of [
      [2, 'completed'],
      [3, 'skipped'],
      [-3, 'skipped'],
    ] as const)
      await db.rows(`SELECT * FROM ${s()}.mark_window($1, $2, $3, 'test', NULL, 'ops', now())`, [
        'marked',
        key(h),
        outcome,
      ]);
    // Forty final windows scheduled ahead (`--scheduled-time` in the future): the due ones are
    // dropped from the digest, whose floor passes them, so the ledger must be read.
    await job('ahead');
    await windows('ahead', [...range(0, 30), ...range(-40, -1)]);
    // More marks than the digest keeps: the ledger must be read.
    await job('many-marks');
    await windows('many-marks', [0, 2, ...range(4, 30)]);
    await windows('many-marks', range(300, 370), { scheduled: false });
    await windows('many-marks', [3], { scheduled: false });
    // Deleted: some by a batch (prune's way), and the latest completion by hand.
    await job('deleted');
    await windows('deleted', range(0, 40));
    await db.rows(`DELETE FROM ${s()}.windows WHERE job = 'deleted' AND window_key = ANY($1)`, [
      [key(5), key(6), key(7), key(35), key(36)],
    ]);
    await db.rows(`DELETE FROM ${s()}.windows WHERE job = 'deleted' AND window_key = $1`, [key(0)]);
    // A zone that is an alias of UTC, its windows completed with the +00:00 spelling of old.
    await job('legacy', 'Etc/UTC');
    await windows('legacy', range(0, 10), { suffix: '+00:00' });
    await windows('legacy', range(11, 30));
    // Written with the triggers off (a load, a restore): no digest until rebuilt.
    await job('loaded');
    const client = await db.pool.connect();
    try {
      await client.query(`SET session_replication_role = replica`);
      await client.query(
        `INSERT INTO ${s()}.windows (job, window_key, scheduled_at, owner, generation, completed_at, outcome)
         SELECT 'loaded', to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), t, 'h:1:x', 1, t, 'completed'
           FROM generate_series(0, 30) h, LATERAL (SELECT $1::timestamptz - h * interval '1 hour') AS x(t) WHERE h <> 4`,
        [at(0)],
      );
    } finally {
      client.release();
    }

    expect(await digest('healthy')).toMatchObject({ marks_full: false });
    expect((await digest('healthy'))!.n).toBeLessThanOrEqual(48);
    expect((await digest('healthy'))!.floor_ms).toBeGreaterThan(at(100).getTime());
    expect((await digest('ahead'))!.floor_ms).toBeGreaterThanOrEqual(at(0).getTime());
    expect(await digest('many-marks')).toMatchObject({ marks_full: true });
    expect(await digest('loaded')).toBeUndefined();

    const { kept, ledger, rebuilt } = await threeWays();
    expect(kept).toBe(ledger);
    expect(rebuilt).toBe(ledger);
    // And the cases say what they should (so the comparison is of something).
    const states = new Map((await readJobStates(store)).jobs.map((j) => [j.name, j]));
    const listed = (n: string): string[] => states.get(n)!.notCompleted.map((o) => `${o.window} ${o.outcome}`);
    expect(states.get('healthy')!.notCompletedCount).toBe(0);
    expect(listed('gaps')).toEqual(
      expect.arrayContaining([`${key(3)} failed`, `${key(5)} failed`, `${key(7)} no run`, `${key(9)} abandoned`]),
    );
    expect(listed('rerun')).toEqual(expect.arrayContaining([`${key(6)} abandoned`]));
    expect(states.get('rerun')!.lastWindow).toBe(key(1));
    expect(listed('marked')).toEqual(expect.arrayContaining([`${key(4)} no run`, `${key(6)} no run`]));
    expect(listed('marked')).not.toEqual(expect.arrayContaining([`${key(2)} no run`]));
    expect(states.get('ahead')!.notCompletedCount).toBe(0);
    expect(listed('many-marks')).toEqual(expect.arrayContaining([`${key(1)} no run`]));
    expect(listed('many-marks')).not.toEqual(expect.arrayContaining([`${key(3)} no run`]));
    expect(listed('deleted')).toEqual(expect.arrayContaining([`${key(5)} no run`, `${key(7)} no run`]));
    expect(states.get('deleted')!.lastWindow).toBe(key(1));
    expect(states.get('legacy')!.notCompletedCount).toBe(0);
    expect(listed('loaded')).toEqual([`${key(4)} no run`]);
  });

  it('a healthy job is judged from its digest alone, and a real run keeps the digest', async () => {
    const name = 'real';
    const hourly = ['--name', name, '--schedule', '0 * * * *', '--window-from-schedule'];
    for (const h of range(0, 25).reverse()) {
      const r = await runCli([
        'run',
        '--database-url',
        db.url,
        '--schema',
        db.schema,
        ...hourly,
        '--scheduled-time',
        key(h),
        '--',
        'true',
      ]);
      expect(r.exitCode, r.all).toBe(0);
    }
    await db.rows(`UPDATE ${s()}.jobs SET created_at = now() - interval '200 hours' WHERE name = $1`, [name]);
    expect((await digest(name))!.n).toBe(26);
    const state = async (): Promise<JobState> => (await readJobStates(store, name)).jobs[0]!;
    expect((await state()).notCompletedCount).toBe(0);
    expect((await state()).lastWindow).toBe(key(0));
    // The ledger's rows gone behind the triggers' back: the digest alone still answers (a read
    // of the ledger would report 26 occurrences not run), which is what keeps the read flat.
    const client = await db.pool.connect();
    try {
      await client.query(`SET session_replication_role = replica`);
      await client.query(`CREATE TABLE ${s()}.real_saved AS SELECT * FROM ${s()}.windows WHERE job = $1`, [name]);
      await client.query(`DELETE FROM ${s()}.windows WHERE job = $1`, [name]);
      expect((await state()).notCompletedCount).toBe(0);
      expect((await state()).lastWindow).toBe(key(0));
      await client.query(`INSERT INTO ${s()}.windows SELECT * FROM ${s()}.real_saved`);
      await client.query(`DROP TABLE ${s()}.real_saved`);
    } finally {
      client.release();
    }
    // `mark`, then a rerun through the CLI: the digest follows (compared with the ledger).
    const m = await runCli([
      'mark',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--name',
      name,
      '--window',
      key(30),
      '--skipped',
      '--reason',
      'test',
    ]);
    expect(m.exitCode, m.all).toBe(0);
    const { kept, ledger } = await threeWays();
    expect(kept).toBe(ledger);
  });
});
