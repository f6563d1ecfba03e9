// Versions instead of last-write-wins (seed 003), through the real CLI on both stores: the
// registry a manual run cannot erase, pause/resume/mark/release as compare-and-set writes.
import { existsSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, scrapeOnce, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-operator-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

interface StoreUnderTest {
  args: () => string[];
  /** Move the job's registration back (as if registered two years ago), so that a due tick counts. */
  backdate: (job: string) => Promise<void>;
}

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
const stores: Array<[string, StoreUnderTest]> = [
  [
    'postgresql',
    {
      args: () => ['--database-url', db.url, '--schema', db.schema],
      backdate: async (job) => {
        await db.rows(`UPDATE ${db.schema}.jobs SET created_at = now() - interval '2 years' WHERE name = $1`, [job]);
      },
    },
  ],
  [
    'sqlite',
    {
      args: () => ['--state-file', stateFile],
      backdate: async (job) => {
        const raw = new Database(stateFile);
        try {
          raw.prepare('UPDATE jobs SET created_at = created_at - ? WHERE name = ?').run(2 * 366 * 86_400_000, job);
        } finally {
          raw.close();
        }
      },
    },
  ],
];

const ok = ['--', process.execPath, fixture('exit-with.mjs'), '0'];
/** A command that leaves a file behind when it runs: absent, it never started. */
const touch = (file: string): string[] => [
  '--',
  process.execPath,
  '-e',
  `require('node:fs').writeFileSync(${JSON.stringify(file)}, 'ran')`,
];
const msgs = (stderr: string): string[] => logLines(stderr).map((l) => String(l.msg));

describe.each(stores)('operator writes: %s', (kind, store) => {
  // The store's flags right after the command's name: a run's command follows `--`.
  const cli = (args: string[]) => runCli([args[0]!, ...store.args(), ...args.slice(1)], noDb);
  const status = async (job: string) => JSON.parse((await cli(['status', '--name', job, '--json'])).stdout).jobs[0];
  const history = async (job: string) =>
    JSON.parse((await cli(['history', '--name', job, '--json'])).stdout) as Array<{
      seq: string;
      kind: string;
      host: string;
      window: string | null;
      detail: Record<string, unknown>;
    }>;
  const n = (name: string): string => `${name}-${kind}`;

  it('a manual run never erases the registered schedule; a differing schedule is a job-changed event and a warning; check warns when it keeps changing', async () => {
    const job = n('mj');
    const sched = ['run', '--name', job, '--schedule', '* * * * *', '--window-from-schedule'];
    expect((await cli([...sched, ...ok])).exitCode).toBe(0);
    const before = await status(job);
    expect(before).toMatchObject({ schedule: '* * * * *', windowMode: 'schedule', version: 1 });

    const manual = await cli(['run', '--name', job, '--window', 'manual-test', ...ok]);
    expect(manual.exitCode, manual.all).toBe(0);
    expect(msgs(manual.stderr)).not.toContain(
      'job settings differ from the registry; adopted (a job-changed event records it: if the hosts disagree, align their flags)',
    );
    expect(await status(job)).toMatchObject({ schedule: '* * * * *', windowMode: 'schedule', version: 1 });
    expect((await history(job)).map((e) => e.kind)).not.toContain('job-changed');

    // Another host (or deployment) with another schedule: adopted, said, recorded.
    const changed = await cli(['run', '--name', job, '--schedule', '*/5 * * * *', '--window-from-schedule', ...ok]);
    expect(changed.exitCode, changed.all).toBe(0);
    const warn = logLines(changed.stderr).find((l) =>
      String(l.msg).startsWith('job settings differ from the registry'),
    );
    expect(warn, changed.stderr).toMatchObject({
      level: 'warn',
      old: { schedule: '* * * * *' },
      new: { schedule: '*/5 * * * *' },
      version: 2,
    });
    expect(await status(job)).toMatchObject({ schedule: '*/5 * * * *', version: 2, recentJobChanges: 1 });
    const events = (await history(job)).filter((e) => e.kind === 'job-changed');
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      detail: { old: { schedule: '* * * * *' }, new: { schedule: '*/5 * * * *' }, version: 2, adopted: true },
    });
    expect(events[0]!.host).not.toBe('unknown');
    expect((await cli(['check', '--name', job])).exitCode).toBe(0);

    // Hosts that keep disagreeing: two more flips within the hour, and check warns (exit 1).
    expect((await cli([...sched, ...ok])).exitCode).toBe(0);
    expect(
      (await cli(['run', '--name', job, '--schedule', '*/5 * * * *', '--window-from-schedule', ...ok])).exitCode,
    ).toBe(0);
    const check = await cli(['check', '--name', job]);
    expect(check.exitCode, check.all).toBe(1);
    expect(check.stdout).toMatch(
      new RegExp(`^WARNING ${job}: settings-disagree: its settings changed 3 times within 1h`, 'm'),
    );
  });

  it('pause: runs exit 0 without starting the command, the occurrence is skipped (final) and not overdue; status, check --json and history show it', async () => {
    const job = n('paused');
    const year = new Date().getUTCFullYear();
    // A yearly schedule: its due tick (this year's) stays put while the test runs.
    const sched = ['run', '--name', job, '--schedule', '0 0 1 1 *', '--window-from-schedule', '--alert-after', '1s'];
    expect((await cli([...sched, '--scheduled-time', `${year - 1}-01-01T00:00:00Z`, ...ok])).exitCode).toBe(0);
    await store.backdate(job);
    expect((await cli(['check', '--name', job])).exitCode).toBe(2);

    const paused = await cli(['pause', '--name', job, '--reason', 'ledger migration']);
    expect(paused.exitCode, paused.all).toBe(0);
    expect(paused.stdout).toMatch(
      new RegExp(`^paused ${job}: version 2, event \\d+, until resumed\\. A run already holding the lease goes on`),
    );
    const check = await cli(['check', '--name', job, '--json']);
    expect(check.exitCode, check.all).toBe(0);
    const report = JSON.parse(check.stdout);
    expect(report.problems).toEqual([]);
    expect(report.paused).toEqual([
      expect.objectContaining({
        job,
        reason: 'ledger migration',
        by: expect.stringMatching(/^.+@.+$/),
        until: null,
        version: 2,
      }),
    ]);
    expect(report.paused[0].since).toEqual(expect.any(String));
    expect((await cli(['status', '--name', job])).stdout).toMatch(/paused/);

    const marker = path.join(tmp, `${job}.ran`);
    const tick = await cli([...sched, '--scheduled-time', `${year}-01-01T00:00:00Z`, ...touch(marker)]);
    expect(tick.exitCode, tick.all).toBe(0);
    expect(existsSync(marker)).toBe(false);
    expect(msgs(tick.stderr)).toContain('job paused (leasejob pause): occurrence skipped, command not started');
    // The raw line names its window once (JSON.parse would hide a repeated key).
    const pausedLine = tick.stderr.split('\n').find((l) => l.includes('job paused (leasejob pause)'))!;
    expect(pausedLine.match(/"window":/g)).toHaveLength(1);
    const s = await status(job);
    expect(s).toMatchObject({
      paused: true,
      version: 2,
      overdue: false,
      openWindows: [],
      pause: { reason: 'ledger migration', until: null },
    });
    expect(s.lastWindow).toBe(s.due.window);
    const skip = (await history(job)).at(-1)!;
    expect(skip).toMatchObject({ kind: 'paused-skip', window: s.due.window, detail: { reason: 'ledger migration' } });

    const resumed = await cli(['resume', '--name', job]);
    expect(resumed.exitCode, resumed.all).toBe(0);
    expect(resumed.stdout).toMatch(new RegExp(`^resumed ${job}: version 3, event \\d+`));
    // The skipped occurrence is final: not overdue once resumed, and not run again.
    expect((await cli(['check', '--name', job])).exitCode).toBe(0);
    expect((await cli([...sched, '--scheduled-time', `${year}-01-01T00:00:00Z`, ...touch(marker)])).exitCode).toBe(0);
    expect(existsSync(marker)).toBe(false);
    const kinds = (await history(job)).map((e) => e.kind);
    expect(kinds.filter((k) => k === 'paused' || k === 'resumed')).toEqual(['paused', 'resumed']);
    expect((await cli(['resume', '--name', job])).stdout).toMatch(/is not paused: nothing to resume \(version 3\)/);
  });

  it('pause --until ends by itself on the store clock', async () => {
    const job = n('until');
    expect((await cli(['run', '--name', job, '--window', 'w0', ...ok])).exitCode).toBe(0);
    // Long enough for the run below to start within it on a busy machine.
    expect((await cli(['pause', '--name', job, '--until', '8s'])).exitCode).toBe(0);
    const marker = path.join(tmp, `${job}.ran`);
    const during = await cli(['run', '--name', job, '--window', 'w1', ...touch(marker)]);
    expect(during.exitCode, during.all).toBe(0);
    expect(existsSync(marker)).toBe(false);
    expect((await status(job)).pause.until).toEqual(expect.any(String));
    await waitFor('the pause to end', async () => (await status(job)).paused === false);
    const after = await cli(['run', '--name', job, '--window', 'w2', ...touch(marker)]);
    expect(after.exitCode, after.all).toBe(0);
    expect(existsSync(marker)).toBe(true);
  });

  it('two operators racing: a write against a version already changed is a conflict (exit 65) with the current state, nothing written', async () => {
    const job = n('race');
    expect((await cli(['run', '--name', job, '--window', 'w', ...ok])).exitCode).toBe(0);
    const v = (await status(job)).version as number;
    // Both read version v; the pause lands first; the resume written against v is refused.
    expect((await cli(['pause', '--name', job, '--reason', 'first', '--expect-version', String(v)])).exitCode).toBe(0);
    const events = (await history(job)).length;
    const stale = await cli(['resume', '--name', job, '--expect-version', String(v)]);
    expect(stale.exitCode, stale.all).toBe(65);
    expect(stale.stderr).toMatch(
      new RegExp(
        `^leasejob: job "${job}" changed since version ${v} was read; nothing written\\. It is now at version ${v + 1}, paused since \\S+ by \\S+@\\S+ \\(first\\)`,
        'm',
      ),
    );
    expect(await status(job)).toMatchObject({ paused: true, version: v + 1 });
    expect((await history(job)).length).toBe(events);
    const staleMark = await cli(['mark', '--name', job, '--window', 'x', '--done', '--expect-version', String(v)]);
    expect(staleMark.exitCode, staleMark.all).toBe(65);
    expect((await cli(['release', '--name', job, '--expect-version', String(v)])).exitCode).toBe(65);

    // Run at once, without --expect-version: each writes over the version it read, so the
    // outcome is one of the serial ones, and every write that happened is an event.
    const [a, b] = await Promise.all([
      cli(['resume', '--name', job]),
      cli(['pause', '--name', job, '--reason', 'second']),
    ]);
    for (const r of [a, b]) expect([0, 65], r.all).toContain(r.exitCode);
    const after = await status(job);
    const writes = (await history(job)).slice(events).filter((e) => e.kind === 'paused' || e.kind === 'resumed');
    expect(writes.length).toBe([a, b].filter((r) => r.exitCode === 0 && !/not paused/.test(r.stdout)).length);
    expect(after.version).toBe(v + 1 + writes.length);
    expect(after.paused).toBe(writes.at(-1)?.kind === 'resumed' ? false : true);
    expect(writes.map((e) => Number(e.seq))).toEqual([...writes.map((e) => Number(e.seq))].sort((x, y) => x - y));
  });

  it('mark --done: the next run skips the window; refused (75) while a live owner runs it; release refuses a live holder without --force (75)', async () => {
    const job = n('mark');
    const gate = path.join(tmp, `${job}.gate`);
    const holder = startCli(
      [
        'run',
        '--name',
        job,
        '--window',
        'busy',
        '--ttl',
        '30s',
        ...store.args(),
        '--',
        process.execPath,
        fixture('wait-for-file.mjs'),
        gate,
      ],
      noDb,
    );
    await waitFor(
      'the lease to be held',
      async () => (await cli(['status', '--name', job, '--json'])).exitCode === 0 && (await status(job)).held === true,
    );
    const v = (await status(job)).version as number;

    const refused = await cli(['mark', '--name', job, '--window', 'busy', '--done']);
    expect(refused.exitCode, refused.all).toBe(75);
    expect(refused.stderr).toMatch(/window busy of job .* is being run by a live owner .*; nothing written/);
    expect(await status(job)).toMatchObject({ version: v, openWindows: [{ window: 'busy', outcome: 'running' }] });

    const done = await cli([
      'mark',
      '--name',
      job,
      '--window',
      'by-hand',
      '--done',
      '--reason',
      'ran the script myself',
    ]);
    expect(done.exitCode, done.all).toBe(0);
    expect(done.stdout).toMatch(
      new RegExp(`^marked ${job} window by-hand done: version ${v + 1}, event \\d+; runs skip it from now on`),
    );
    const marker = path.join(tmp, `${job}.ran`);
    const next = await cli(['run', '--name', job, '--window', 'by-hand', ...touch(marker)]);
    expect(next.exitCode, next.all).toBe(0);
    expect(existsSync(marker)).toBe(false);
    expect(msgs(next.stderr)).toContain('window already completed');
    expect((await history(job)).find((e) => e.kind === 'window-marked')).toMatchObject({
      window: 'by-hand',
      detail: { outcome: 'completed', reason: 'ran the script myself' },
    });

    const beforeRelease = (await status(job)).version as number;
    const release = await cli(['release', '--name', job]);
    expect(release.exitCode, release.all).toBe(75);
    expect(release.stderr).toMatch(
      /is held by a live owner .* that still renews; nothing released\. With --force, its child is stopped at the owner's next renewal .*, its outcome is not recorded \(that runner exits 75\), and its window stays open, so the next run does it again/,
    );
    expect(await status(job)).toMatchObject({ held: true, version: beforeRelease });
    const forced = await cli(['release', '--name', job, '--force']);
    expect(forced.exitCode, forced.all).toBe(0);
    expect(forced.stdout).toMatch(/live: forced/);
    expect((await holder).exitCode).toBe(75);
    // The window stays open: the next run does it again.
    expect((await status(job)).openWindows.map((w: { window: string }) => w.window)).toContain('busy');
    const redo = await cli(['run', '--name', job, '--window', 'busy', ...touch(marker)]);
    expect(redo.exitCode, redo.all).toBe(0);
    expect(existsSync(marker)).toBe(true);
  });

  it('bad input: exit 64 and nothing written (unknown job, --until in the past, a window not of the schedule, flags)', async () => {
    const job = n('bad');
    expect(
      (
        await cli([
          'run',
          '--name',
          job,
          '--schedule',
          '*/15 * * * *',
          '--window-from-schedule',
          '--window-format',
          "yyyy-MM-dd'T'HH:mm",
          ...ok,
        ])
      ).exitCode,
    ).toBe(0);
    const before = { version: (await status(job)).version, events: (await history(job)).length };
    const cases: Array<[string[], RegExp]> = [
      [['pause', '--name', n('never-ran')], /no job named/],
      [['resume', '--name', n('never-ran')], /no job named/],
      [['mark', '--name', n('never-ran'), '--window', 'w', '--done'], /no job named/],
      [['release', '--name', n('never-ran')], /no job named/],
      [['pause', '--name', job, '--until', '2020-01-01T00:00:00Z'], /--until.*in the past/],
      [['pause', '--name', job, '--until', '2030-01-01T00:00:00'], /--until.*offset/],
      [['pause', '--name', job, '--until', 'soon'], /--until/],
      [['pause', '--name', job, '--reason', 'x'.repeat(501)], /--reason/],
      [['pause', '--name', job, '--expect-version', 'two'], /--expect-version/],
      [
        ['mark', '--name', job, '--window', '2026-12-01T10:07', '--done'],
        /not one of job .*'s: .*schedule .*\*\/15 \* \* \* \*.*the nearest is 2026-12-01T10:15/,
      ],
      [['mark', '--name', job, '--window', 'yesterday', '--skipped'], /not one of job/],
      [['mark', '--name', job, '--window', '2026-12-01T10:15'], /exactly one of `--done`/],
      [['mark', '--name', job, '--window', '2026-12-01T10:15', '--done', '--skipped'], /exactly one of `--done`/],
      [['mark', '--name', job, '--done'], /--window/],
    ];
    for (const [args, message] of cases) {
      const r = await cli(args);
      expect(r.exitCode, `${args.join(' ')}: ${r.all}`).toBe(64);
      expect(r.stderr, args.join(' ')).toMatch(message);
    }
    expect((await status(job)).version).toBe(before.version);
    expect((await history(job)).length).toBe(before.events);
    // One of the schedule's windows is accepted.
    expect((await cli(['mark', '--name', job, '--window', '2026-12-01T10:15', '--skipped'])).exitCode).toBe(0);
  });
});

describe('two operators racing, for real (PostgreSQL)', () => {
  it("pause and resume that both read the same version: one is written, the other is a conflict (65) naming the winner's state", async () => {
    const conn = ['--database-url', db.url, '--schema', db.schema];
    expect((await runCli(['run', '--name', 'real-race', '--window', 'w', ...conn, ...ok])).exitCode).toBe(0);
    expect((await runCli(['pause', '--name', 'real-race', '--reason', 'before', ...conn])).exitCode).toBe(0);
    const events = (await db.rows(`SELECT 1 FROM ${db.schema}.events WHERE job = 'real-race'`)).length;
    // Hold the job's row: both commands read its version (a plain read is not held up), then
    // queue for the row in their write. Let go once both wait: one writes, the other finds the
    // version it read gone.
    const holder = await db.pool.connect();
    let a, b;
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM ${db.schema}.jobs WHERE name = 'real-race' FOR UPDATE`);
      const resume = startCli(['resume', '--name', 'real-race', ...conn]);
      const pause = startCli(['pause', '--name', 'real-race', '--reason', 'after', ...conn]);
      await waitFor(
        'both writes to wait for the row',
        async () =>
          (
            await db.rows(
              `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND (query LIKE '%resume_job(%' OR query LIKE '%pause_job(%')`,
            )
          ).length === 2,
      );
      await holder.query('COMMIT');
      [a, b] = await Promise.all([resume, pause]);
    } finally {
      holder.release();
    }
    expect([a.exitCode, b.exitCode].sort(), `${a.all}\n${b.all}`).toEqual([0, 65]);
    const loser = a.exitCode === 65 ? a : b;
    const winner = a.exitCode === 65 ? 'pause' : 'resume';
    expect(loser.stderr).toMatch(/changed since version 2 was read; nothing written\. It is now at version 3, /);
    expect(loser.stderr).toMatch(
      winner === 'resume' ? /version 3, not paused/ : /version 3, paused since .* \(after\)/,
    );
    const written = await db.rows<{ kind: string }>(
      `SELECT kind FROM ${db.schema}.events WHERE job = 'real-race' ORDER BY seq OFFSET $1`,
      [events],
    );
    expect(written.map((e) => e.kind)).toEqual([winner === 'resume' ? 'resumed' : 'paused']);
  });
});

describe('operator state in the exporter', () => {
  it('shows paused, since, until, reason and who; and the version', async () => {
    const conn = ['--database-url', db.url, '--schema', db.schema];
    expect((await runCli(['run', '--name', 'exp-paused', '--window', 'w', ...conn, ...ok])).exitCode).toBe(0);
    expect(
      (await runCli(['pause', '--name', 'exp-paused', '--reason', 'quarter close', '--until', '1h', ...conn])).exitCode,
    ).toBe(0);
    const text = await scrapeOnce(conn, {}, { timeoutMs: 120_000 });
    expect(text).toMatch(/^leasejob_job_paused\{job="exp-paused"\} 1$/m);
    expect(text).toMatch(/^leasejob_job_version\{job="exp-paused"\} 2$/m);
    expect(text).toMatch(/^leasejob_job_paused_since_timestamp_seconds\{job="exp-paused"\} \d/m);
    expect(text).toMatch(/^leasejob_job_paused_until_timestamp_seconds\{job="exp-paused"\} \d/m);
    expect(text).toMatch(/^leasejob_job_pause_info\{job="exp-paused",reason="quarter close",by="[^"]+@[^"]+"\} 1$/m);
  });
});
