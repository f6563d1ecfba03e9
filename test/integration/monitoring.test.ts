// Monitoring by absence: registry, events, status, history, check, exporter, clock signals.
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, fixture, logLines, runCli, startCli, startExporter, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { faketimeEnv, faketimeLibrary } from '../helpers/faketime.mjs';
import { startProxy } from '../helpers/proxy.mjs';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-mon-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

const conn = (): string[] => ['--database-url', db.url, '--schema', db.schema];
const ok = ['--', process.execPath, fixture('exit-with.mjs'), '0'];

async function exporterOf(url?: string) {
  const e = await startExporter(['--database-url', url ?? db.url, '--schema', db.schema], {}, { timeoutMs: 120_000 });
  const scrape = async (): Promise<string> => (await fetch(`http://127.0.0.1:${e.port}/metrics`)).text();
  return { ...e, scrape };
}

function metric(text: string, name: string, labels: string): number | undefined {
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`${name}{${labels}}`) || (labels === '' && l.startsWith(`${name} `)));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

describe('monitoring by absence', () => {
  it('the exporter sums event counts over hosts per job, keeps busy skips per host, and types counters', async () => {
    await db.rows(
      `INSERT INTO ${db.schema}.event_counts (job, kind, host, n) VALUES
         ('sum-job', 'window-completed', 'h1', 3), ('sum-job', 'window-completed', 'h2', 4),
         ('sum-job', 'lease-lost', 'h1', 1), ('sum-job', 'lease-lost', 'h2', 2),
         ('sum-job', 'busy-skip', 'h1', 5), ('sum-job', 'busy-skip', 'h2', 6)`,
    );
    const exporter = await exporterOf();
    try {
      const text = await exporter.scrape();
      expect(metric(text, 'leasejob_runs_total', 'job="sum-job",outcome="completed"')).toBe(7);
      expect(metric(text, 'leasejob_leases_lost_total', 'job="sum-job"')).toBe(3);
      expect(metric(text, 'leasejob_busy_skips_total', 'job="sum-job",host="h1"')).toBe(5);
      expect(metric(text, 'leasejob_busy_skips_total', 'job="sum-job",host="h2"')).toBe(6);
      expect(text).toContain('# TYPE leasejob_runs_total counter');
      expect(text).toContain('# TYPE leasejob_window_overdue gauge');
      expect(text.split('\n').filter((l) => l.startsWith('leasejob_runs_total{job="sum-job"'))).toHaveLength(1);
      // Schema current: both the newest migration applied and the newest shipped.
      const shipped = Math.max(
        ...readdirSync(path.join(ROOT, 'sql'))
          .map((f) => Number.parseInt(f, 10))
          .filter((v) => v > 0),
      );
      expect(metric(text, 'leasejob_schema_version', '')).toBe(shipped);
      expect(metric(text, 'leasejob_schema_version_expected', '')).toBe(shipped);
    } finally {
      await exporter.stop();
      await db.rows(`DELETE FROM ${db.schema}.event_counts WHERE job = 'sum-job'`);
    }
  });

  it('a registered job has leasejob_leases_lost_total and leasejob_notify_failures_total 0 before the first, so increase() counts it', async () => {
    const seeded = await runCli(['run', ...conn(), '--name', 'zero-loss', '--window', 'w1', ...ok]);
    expect(seeded.exitCode, seeded.all).toBe(0);
    const exporter = await exporterOf();
    try {
      const before = await exporter.scrape();
      expect(metric(before, 'leasejob_leases_lost_total', 'job="zero-loss"')).toBe(0);
      expect(metric(before, 'leasejob_notify_failures_total', 'job="zero-loss"')).toBe(0);
      await db.rows(
        `INSERT INTO ${db.schema}.event_counts (job, kind, host, n) VALUES ('zero-loss', 'lease-lost', 'h1', 1), ('zero-loss', 'notify-failed', 'h1', 2)`,
      );
      const text = await exporter.scrape();
      expect(metric(text, 'leasejob_leases_lost_total', 'job="zero-loss"')).toBe(1);
      expect(metric(text, 'leasejob_notify_failures_total', 'job="zero-loss"')).toBe(2);
      expect(text.split('\n').filter((l) => l.startsWith('leasejob_leases_lost_total{job="zero-loss"'))).toHaveLength(
        1,
      );
      expect(
        text.split('\n').filter((l) => l.startsWith('leasejob_notify_failures_total{job="zero-loss"')),
      ).toHaveLength(1);
    } finally {
      await exporter.stop();
      await db.rows(`DELETE FROM ${db.schema}.event_counts WHERE job = 'zero-loss'`);
    }
  });

  it('with the database cut off, a scrape says leasejob_up 0 and serves the last state it read, with its read time; it recovers', async () => {
    const seeded = await runCli(['run', ...conn(), '--name', 'cut-job', '--window', 'w1', ...ok]);
    expect(seeded.exitCode, seeded.all).toBe(0);
    const proxy = await startProxy(db.url);
    const exporter = await exporterOf(proxy.url(db.url));
    /** The sample lines about the database's state: all but the three about the scrape itself. */
    const state = (text: string): string[] =>
      text
        .split('\n')
        .filter((l) => l !== '' && !l.startsWith('#'))
        .filter((l) => !/^leasejob_(up|scrape_duration_seconds|last_read_timestamp_seconds) /.test(l));
    try {
      const before = await exporter.scrape();
      expect(metric(before, 'leasejob_up', '')).toBe(1);
      expect(metric(before, 'leasejob_jobs', '')).toBeGreaterThanOrEqual(1);
      expect(metric(before, 'leasejob_lease_held', 'job="cut-job"')).toBe(0);
      const readAt = metric(before, 'leasejob_last_read_timestamp_seconds', '')!;
      expect(readAt).toBeGreaterThan(Date.now() / 1000 - 600);

      proxy.cut('reset');
      const down = await exporter.scrape();
      expect(metric(down, 'leasejob_up', '')).toBe(0);
      expect(metric(down, 'leasejob_scrape_duration_seconds', '')).toBeGreaterThanOrEqual(0);
      // The state as last read, and when: no per-job alert resolves because the database is away.
      expect(metric(down, 'leasejob_last_read_timestamp_seconds', '')).toBe(readAt);
      expect(state(down)).toEqual(state(before));
      expect(metric(down, 'leasejob_failed_occurrences', 'job="cut-job"')).toBe(0);
      expect((await fetch(`http://127.0.0.1:${exporter.port}/healthz`)).status).toBe(503);

      proxy.heal();
      const after = await waitFor('a scrape to reach the database again', async () => {
        const text = await exporter.scrape();
        return metric(text, 'leasejob_up', '') === 1 ? text : undefined;
      });
      expect(metric(after, 'leasejob_jobs', '')).toBe(metric(before, 'leasejob_jobs', ''));
      expect(metric(after, 'leasejob_last_read_timestamp_seconds', '')).toBeGreaterThanOrEqual(readAt);
    } finally {
      await exporter.stop();
      await proxy.close();
    }
  });

  it('an exporter that has never read the database says leasejob_up 0 and nothing it cannot know', async () => {
    const proxy = await startProxy(db.url);
    const exporter = await exporterOf(proxy.url(db.url));
    try {
      proxy.cut('reset');
      const down = await exporter.scrape();
      // Only those two: no `leasejob_jobs 0` that would read as "no jobs", no read time.
      const samples = down.split('\n').filter((l) => l !== '' && !l.startsWith('#'));
      expect(samples.map((l) => l.split(' ')[0])).toEqual(['leasejob_up', 'leasejob_scrape_duration_seconds']);
      expect(metric(down, 'leasejob_up', '')).toBe(0);
    } finally {
      await exporter.stop();
      await proxy.close();
    }
  });

  it('a scrape whose read meets a silent connection says leasejob_up 0 inside a 10 s scrape timeout', async () => {
    const proxy = await startProxy(db.url);
    const exporter = await exporterOf(proxy.url(db.url));
    try {
      expect(metric(await exporter.scrape(), 'leasejob_up', '')).toBe(1);
      const seen = proxy.silence('event_counts');
      const t0 = performance.now();
      const down = await exporter.scrape();
      await seen;
      expect(metric(down, 'leasejob_up', '')).toBe(0);
      expect(performance.now() - t0).toBeLessThan(9_000);
      // The silent connection was dropped: the next scrape reads on a new one.
      expect(metric(await exporter.scrape(), 'leasejob_up', '')).toBe(1);
    } finally {
      await exporter.stop();
      await proxy.close();
    }
  });

  it('status and check say when the schema is behind (or ahead of) this leasejob, and still answer', async () => {
    const latest = await db.rows<{ v: number }>(`SELECT max(version) AS v FROM ${db.schema}.migrations`);
    await db.rows(`DELETE FROM ${db.schema}.migrations WHERE version = $1`, [latest[0]!.v]);
    // Migration numbers may have gaps (numbers reserved for work not merged yet).
    const [{ v: previous }] = await db.rows<{ v: number }>(`SELECT max(version) AS v FROM ${db.schema}.migrations`);
    try {
      for (const cmd of ['status', 'check']) {
        const r = await runCli([cmd, ...conn()]);
        expect([0, 1, 2], r.all).toContain(r.exitCode);
        const warn = logLines(r.stderr).find((l) => l.msg === 'schema is behind this leasejob; run `leasejob migrate`');
        expect(warn, r.stderr).toMatchObject({ schemaVersion: previous, knownVersion: latest[0]!.v });
      }
    } finally {
      const m = await runCli(['migrate', ...conn()]);
      expect(m.exitCode, m.all).toBe(0);
    }
    const after = await runCli(['status', ...conn()]);
    expect(after.stderr).not.toMatch(/schema is behind/);
    const json = await runCli(['check', ...conn(), '--json']);
    expect(JSON.parse(json.stdout)).toMatchObject({ schemaVersion: latest[0]!.v, knownSchemaVersion: latest[0]!.v });

    // Migrated by a newer leasejob elsewhere: this one says it is the older.
    await db.rows(`INSERT INTO ${db.schema}.migrations (version, name) VALUES (999, 'from_the_future')`);
    try {
      const newer = await runCli(['check', ...conn()]);
      expect(
        logLines(newer.stderr).find((l) => l.msg === 'schema is newer than this leasejob; upgrade leasejob'),
        newer.stderr,
      ).toMatchObject({ schemaVersion: 999, knownVersion: latest[0]!.v });
    } finally {
      await db.rows(`DELETE FROM ${db.schema}.migrations WHERE version = 999`);
    }
  });

  it('a schema behind this leasejob shows in the exporter', async () => {
    const [{ v }] = await db.rows<{ v: number }>(`SELECT max(version) AS v FROM ${db.schema}.migrations`);
    const [removed] = await db.rows<Record<string, unknown>>(
      `DELETE FROM ${db.schema}.migrations WHERE version = $1 RETURNING *`,
      [v],
    );
    const [{ v: previous }] = await db.rows<{ v: number }>(`SELECT max(version) AS v FROM ${db.schema}.migrations`);
    const exporter = await exporterOf();
    try {
      const text = await exporter.scrape();
      expect(metric(text, 'leasejob_schema_version', '')).toBe(previous);
      expect(metric(text, 'leasejob_schema_version_expected', '')).toBe(v);
      expect(text).toContain('# TYPE leasejob_schema_version gauge');
    } finally {
      await exporter.stop();
      const cols = Object.keys(removed);
      await db.rows(
        `INSERT INTO ${db.schema}.migrations (${cols.join(', ')}) VALUES (${cols.map((_, i) => `$${i + 1}`).join(', ')})`,
        cols.map((c) => removed[c]),
      );
    }
  });

  it('an overdue window fails check and shows in the exporter; completing it clears both', async () => {
    // A job that has run before (registered a day ago) and whose latest hourly window is not done.
    const job = ['--name', 'hourly-report', '--schedule', '0 * * * *', '--window-from-schedule', '--alert-after', '1s'];
    const first = await runCli(['run', ...conn(), ...job, '--scheduled-time', '2020-01-01T00:00:00Z', ...ok]);
    expect(first.exitCode, first.all).toBe(0);
    // Registered just before the latest due tick: the hours before it were never expected of it
    // (each would be a due occurrence not completed: test/integration/due-occurrences.test.ts).
    await db.rows(
      `UPDATE ${db.schema}.jobs SET created_at = date_trunc('hour', now() - interval '1 second') - interval '1 second' WHERE name = 'hourly-report'`,
    );

    const check = await runCli(['check', ...conn(), '--json']);
    expect(check.exitCode, check.all).toBe(2);
    const report = JSON.parse(check.stdout) as { problems: Array<{ job: string; kind: string; message: string }> };
    expect(report.problems).toHaveLength(1);
    expect(report.problems[0]).toMatchObject({ job: 'hourly-report', kind: 'overdue' });
    const text = await runCli(['check', ...conn()]);
    expect(text.exitCode).toBe(2);
    expect(text.stdout).toMatch(
      /^CRITICAL hourly-report: overdue: window \S+ \(scheduled \S+\) not completed; overdue since \S+$/m,
    );

    const exporter = await exporterOf();
    try {
      const before = await exporter.scrape();
      expect(metric(before, 'leasejob_window_overdue', 'job="hourly-report"')).toBe(1);
      expect(metric(before, 'leasejob_up', '')).toBe(1);

      const status = JSON.parse((await runCli(['status', ...conn(), '--json', '--name', 'hourly-report'])).stdout) as {
        jobs: Array<{ due: { scheduledAt: string } }>;
      };
      const dueAt = status.jobs[0]!.due.scheduledAt;
      const late = await runCli(['run', ...conn(), ...job, '--scheduled-time', dueAt, ...ok]);
      expect(late.exitCode, late.all).toBe(0);

      expect((await runCli(['check', ...conn(), '--name', 'hourly-report'])).exitCode).toBe(0);
      const after = await exporter.scrape();
      expect(metric(after, 'leasejob_window_overdue', 'job="hourly-report"')).toBe(0);
      expect(metric(after, 'leasejob_runs_total', 'job="hourly-report",outcome="completed"')).toBe(2);
      expect(metric(after, 'leasejob_last_completed_window_timestamp_seconds', 'job="hourly-report"')).toBeGreaterThan(
        Date.now() / 1000 - 3600,
      );
      expect(await (await fetch(`http://127.0.0.1:${exporter.port}/healthz`)).text()).toBe('ok\n');

      // Still completed once an older window has completed after it: no longer the last
      // completed window, so it is looked up by its key rather than known from the last one.
      const older = await runCli(['run', ...conn(), ...job, '--scheduled-time', '2020-01-01T01:00:00Z', ...ok]);
      expect(older.exitCode, older.all).toBe(0);
      const again = JSON.parse((await runCli(['status', ...conn(), '--json', '--name', 'hourly-report'])).stdout) as {
        jobs: Array<{ lastWindow: string; overdue: boolean; due: { window: string } }>;
      };
      expect(again.jobs[0]!.lastWindow).not.toBe(again.jobs[0]!.due.window);
      expect(again.jobs[0]!.overdue).toBe(false);
      expect((await runCli(['check', ...conn(), '--name', 'hourly-report'])).exitCode).toBe(0);
      expect(metric(await exporter.scrape(), 'leasejob_window_overdue', 'job="hourly-report"')).toBe(0);
    } finally {
      const r = await exporter.stop();
      expect(r.exitCode).toBe(0);
    }
  });

  it('a job registered with Etc/UTC by an earlier leasejob, its window completed as ...+00:00: not overdue', async () => {
    const job = 'legacy-utc';
    const run = (at: string) =>
      runCli([
        'run',
        ...conn(),
        '--name',
        job,
        '--schedule',
        '0 * * * *',
        '--tz',
        'Etc/UTC',
        '--window-from-schedule',
        '--scheduled-time',
        at,
        '--',
        'true',
      ]);
    expect(
      (await run(new Date(Math.floor(Date.now() / 3_600_000) * 3_600_000 - 2 * 3_600_000).toISOString())).exitCode,
    ).toBe(0);
    // Registered just before the latest due tick (grace: half the hour), as above.
    await db.rows(
      `UPDATE ${db.schema}.jobs SET created_at = date_trunc('hour', now() - interval '30 minutes') - interval '1 second' WHERE name = $1`,
      [job],
    );
    const due = JSON.parse((await runCli(['status', ...conn(), '--name', job, '--json'])).stdout).jobs[0].due;
    expect(due.window).toMatch(/T\d\d:00:00Z$/);
    expect(due.completed).toBe(false);
    expect((await run(due.scheduledAt)).exitCode).toBe(0);
    // As an earlier leasejob left it: the zone registered as given, the window's key with +00:00.
    await db.rows(`UPDATE ${db.schema}.jobs SET tz = 'Etc/UTC' WHERE name = $1`, [job]);
    await db.rows(`UPDATE ${db.schema}.windows SET window_key = $2 WHERE job = $1 AND window_key = $3`, [
      job,
      due.window.replace(/Z$/, '+00:00'),
      due.window,
    ]);
    const check = await runCli(['check', ...conn(), '--name', job]);
    expect(check.exitCode, check.all).toBe(0);
  });

  it('a window that keeps failing is a warning; a stuck owner is critical', async () => {
    for (let i = 0; i < 3; i++) {
      const r = await runCli([
        'run',
        ...conn(),
        '--name',
        'flaky',
        '--window',
        'w',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '4',
      ]);
      expect(r.exitCode).toBe(4);
    }
    const warn = await runCli(['check', ...conn(), '--name', 'flaky']);
    expect(warn.exitCode, warn.all).toBe(1);
    expect(warn.stdout).toMatch(/WARNING flaky: failing: window w failed 3 attempts/);

    // Behind ten newer open windows, it is still seen; status and the exporter count all eleven.
    for (let i = 1; i <= 10; i++) {
      const r = await runCli([
        'run',
        ...conn(),
        '--name',
        'flaky',
        '--window',
        `newer${i}`,
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '4',
      ]);
      expect(r.exitCode).toBe(4);
    }
    const behind = await runCli(['check', ...conn(), '--name', 'flaky']);
    expect(behind.exitCode, behind.all).toBe(1);
    expect(behind.stdout).toMatch(/WARNING flaky: failing: window w failed 3 attempts/);
    const status = JSON.parse((await runCli(['status', ...conn(), '--name', 'flaky', '--json'])).stdout);
    expect(status.jobs[0].openCount).toBe(11);
    expect(status.jobs[0].openWindows.map((w: { window: string }) => w.window)).toEqual([
      'w',
      ...Array.from({ length: 10 }, (_, i) => `newer${i + 1}`),
    ]);
    expect((await runCli(['status', ...conn(), '--name', 'flaky'])).stdout).not.toContain('more)');
    const exporter = await exporterOf();
    try {
      expect(metric(await exporter.scrape(), 'leasejob_open_windows', 'job="flaky"')).toBe(11);
    } finally {
      await exporter.stop();
    }
    // A twelfth: the oldest plain failure drops off the list, and the table says how many more.
    expect(
      (
        await runCli([
          'run',
          ...conn(),
          '--name',
          'flaky',
          '--window',
          'newer11',
          '--',
          process.execPath,
          fixture('exit-with.mjs'),
          '4',
        ])
      ).exitCode,
    ).toBe(4);
    const table = (await runCli(['status', ...conn(), '--name', 'flaky', '--wide'])).stdout;
    expect(table).toContain('w(failed, attempt 3) newer2(failed, attempt 1)');
    expect(table).toContain('(+1 more)');

    const pidFile = path.join(tmp, 'stuck.pid');
    const holder = startCli([
      'run',
      ...conn(),
      '--name',
      'stuck',
      '--ttl',
      '3s',
      '--kill-grace',
      '500ms',
      '--',
      process.execPath,
      fixture('forever.mjs'),
      pidFile,
    ]);
    await waitFor('holder running', () => existsSync(pidFile));
    await new Promise((r) => setTimeout(r, 1_200));
    const stuck = await runCli(['check', ...conn(), '--name', 'stuck', '--max-hold', '1s']);
    expect(stuck.exitCode, stuck.all).toBe(2);
    expect(stuck.stdout).toMatch(
      /CRITICAL stuck: stuck-owner: owner \S+ has held generation 1 since \S+, longer than --max-hold \(1s\)/,
    );
    holder.kill('SIGTERM');
    expect((await holder).exitCode).toBe(143);
  });

  it('concurrent runs produce gap-free, strictly increasing sequences per job', async () => {
    const runs = Array.from({ length: 12 }, (_, i) =>
      startCli([
        'run',
        ...conn(),
        '--name',
        'seq-job',
        '--window',
        `w${i % 4}`,
        '--ttl',
        '3s',
        '--kill-grace',
        '500ms',
        '--',
        process.execPath,
        fixture('sleep-then.mjs'),
        '200',
        '0',
      ]),
    );
    for (const r of await Promise.all(runs)) expect(r.exitCode, r.all).toBe(0);
    const ev = await db.rows<{ seq: string; kind: string }>(
      `SELECT seq, kind FROM ${db.schema}.events WHERE job = 'seq-job' ORDER BY seq`,
    );
    expect(ev.length).toBeGreaterThan(12);
    expect(ev.map((e) => Number(e.seq))).toEqual(ev.map((_, i) => i + 1));
    const counter = await db.rows<{ last_seq: string }>(
      `SELECT last_seq FROM ${db.schema}.jobs WHERE name = 'seq-job'`,
    );
    expect(Number(counter[0]?.last_seq)).toBe(ev.length);
    // Every acquire has its release, in order, before the next acquire.
    const ownership = ev
      .filter((e) => ['acquired', 'stale-takeover', 'released'].includes(e.kind))
      .map((e) => (e.kind === 'released' ? 'r' : 'a'))
      .join('');
    expect(ownership).toMatch(/^(ar)+$/);
  });

  it('status and history for a known scenario, as a table and as JSON', async () => {
    const job = ['--name', 'report', '--window', '2026-11-29'];
    expect(
      (await runCli(['run', ...conn(), ...job, '--', process.execPath, fixture('exit-with.mjs'), '2'])).exitCode,
    ).toBe(2);
    expect((await runCli(['run', ...conn(), ...job, ...ok])).exitCode).toBe(0);
    expect(
      (
        await runCli([
          'run',
          ...conn(),
          '--name',
          'report',
          '--window',
          '2026-11-30',
          '--',
          process.execPath,
          fixture('exit-with.mjs'),
          '1',
        ])
      ).exitCode,
    ).toBe(1);

    const status = await runCli(['status', ...conn(), '--name', 'report', '--wide']);
    expect(status.exitCode, status.all).toBe(0);
    const [header, columns, row] = status.stdout.trimEnd().split('\n');
    expect(header).toMatch(/^store: postgresql, postgres:\/\/\S+ schema t_\w+, time /);
    expect(columns).toMatch(
      /^JOB\s+HOLDER\s+GEN\s+EXPIRES IN\s+LAST COMPLETED WINDOW\s+COMPLETED AT\s+OPEN WINDOWS\s+DUE\s+NOT COMPLETED$/,
    );
    expect(row).toMatch(
      /^report\s+free\s+3\s+not held\s+2026-11-29\s+\S+Z\s+2026-11-30\(failed, attempt 1\)\s+(no schedule|no due windows)\s+(no schedule|no due windows)$/,
    );
    // By default: the columns that fit, in words.
    const narrow = (await runCli(['status', ...conn(), '--name', 'report'], { COLUMNS: '80' })).stdout.split('\n');
    expect(narrow[1]).toMatch(/^JOB\s+LEASE\s+LAST COMPLETED\s+OPEN\s+DUE$/);
    expect(narrow[2]).toMatch(
      /^report\s+free\s+2026-11-29\s+2026-11-30\(failed, attempt 1\)\s+(no schedule|no due windows)$/,
    );
    const sj = JSON.parse((await runCli(['status', ...conn(), '--name', 'report', '--json'])).stdout);
    expect(sj.jobs[0]).toMatchObject({
      name: 'report',
      generation: '3',
      held: false,
      lastWindow: '2026-11-29',
      openWindows: [{ window: '2026-11-30', attempts: 1, outcome: 'failed' }],
      overdue: false,
    });

    const history = await runCli(['history', ...conn(), '--name', 'report', '--json']);
    const kinds = (JSON.parse(history.stdout) as Array<{ seq: string; kind: string }>).map((e) => `${e.seq}:${e.kind}`);
    expect(kinds).toEqual([
      '1:acquired',
      '2:window-claimed',
      '3:window-failed',
      '4:released',
      '5:acquired',
      '6:window-claimed',
      '7:window-completed',
      '8:released',
      '9:acquired',
      '10:window-claimed',
      '11:window-failed',
      '12:released',
    ]);
    const table = await runCli(['history', ...conn(), '--name', 'report', '--limit', '2']);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^SEQ\s+DB TIME\s+KIND\s+WINDOW\s+GEN\s+OWNER\s+DETAIL$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 1).concat(l.split(/\s+/).slice(2, 5)))).toEqual([
      ['11', 'window-failed', '2026-11-30', '3'],
      ['12', 'released', '2026-11-30', '3'],
    ]);
  });
});

const FAKETIME_LIB = faketimeLibrary();

describe.skipIf(!FAKETIME_LIB)('clock signals (faketime)', () => {
  // The monotonic clock stays true: only the wall clock is skewed or jumps.
  const skewed = (file: string) => faketimeEnv(FAKETIME_LIB!, file);

  it('a wall clock 10 minutes behind: offset measured within a second, run unaffected', async () => {
    const file = path.join(tmp, 'skew-10m');
    writeFileSync(file, '-600s\n');
    const r = await runCli(
      [
        'run',
        ...conn(),
        '--name',
        'skewed',
        '--window',
        'w',
        '--ttl',
        '3s',
        '--kill-grace',
        '500ms',
        '--',
        process.execPath,
        fixture('sleep-then.mjs'),
        '1500',
        '0',
      ],
      skewed(file),
    );
    expect(r.exitCode, r.all).toBe(0);
    const acquired = logLines(r.stderr).find((l) => l.msg === 'lease acquired')!;
    expect(Math.abs(Number(acquired.offsetMs) - 600_000)).toBeLessThan(1_000);
    expect(logLines(r.stderr).some((l) => l.msg === 'clock offset to database is large')).toBe(true);
    const w = await db.rows<{ completed: boolean; attempts: number }>(
      `SELECT completed_at IS NOT NULL AS completed, attempts FROM ${db.schema}.windows WHERE job = 'skewed'`,
    );
    expect(w).toEqual([{ completed: true, attempts: 1 }]);
    const host = await db.rows<{ offset_ms: number }>(`SELECT offset_ms FROM ${db.schema}.hosts`);
    expect(host.some((h) => Math.abs(h.offset_ms - 600_000) < 1_000)).toBe(true);
    const ev = await db.rows<{ kind: string }>(
      `SELECT kind FROM ${db.schema}.events WHERE job = 'skewed' AND kind = 'clock-offset'`,
    );
    expect(ev).toHaveLength(1);
  });

  it('a crontab host 5 minutes ahead: the occurrence it names is not due by the database clock; not run, exit 75, window left open', async () => {
    const file = path.join(tmp, 'ahead-5m');
    writeFileSync(file, '+300s\n');
    const r = await runCli(
      [
        'run',
        ...conn(),
        '--name',
        'fast-host',
        '--schedule',
        '*/2 * * * *',
        '--window-from-schedule',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      skewed(file),
    );
    expect(r.exitCode, r.all).toBe(75);
    expect(logLines(r.stderr).map((l) => l.msg)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^occurrence not due by the database clock/),
        'window left open',
        'lease released',
      ]),
    );
    expect(logLines(r.stderr).some((l) => l.msg === 'child exited')).toBe(false);
    const w = await db.rows<{ completed: boolean; outcome: string; ahead: boolean }>(
      `SELECT completed_at IS NOT NULL AS completed, outcome, scheduled_at > now() + interval '60 seconds' AS ahead FROM ${db.schema}.windows WHERE job = 'fast-host'`,
    );
    expect(w).toEqual([{ completed: false, outcome: 'failed', ahead: true }]);
  });

  it('a Kubernetes node 3 minutes behind: the Job named for this minute runs (the database clock says it is due)', async () => {
    const file = path.join(tmp, 'behind-3m');
    writeFileSync(file, '-180s\n');
    const minute = Math.floor(Date.now() / 60_000);
    const r = await runCli(
      [
        'run',
        ...conn(),
        '--name',
        'slow-node',
        '--schedule',
        '* * * * *',
        '--window-from-schedule',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      { ...skewed(file), JOB_NAME: `slow-node-${minute}`, KUBERNETES_SERVICE_HOST: '10.0.0.1' },
    );
    expect(r.exitCode, r.all).toBe(0);
    const w = await db.rows<{ window_key: string; completed: boolean }>(
      `SELECT window_key, completed_at IS NOT NULL AS completed FROM ${db.schema}.windows WHERE job = 'slow-node'`,
    );
    expect(w).toEqual([{ window_key: new Date(minute * 60_000).toISOString().replace('.000Z', 'Z'), completed: true }]);
  });

  it('a wall clock 30 days behind (past a 32-bit millisecond count): the window still completes', async () => {
    const file = path.join(tmp, 'skew-30d');
    writeFileSync(file, '-30d\n');
    const r = await runCli(
      [
        'run',
        ...conn(),
        '--name',
        'skewed30d',
        '--window',
        'w',
        '--ttl',
        '3s',
        '--kill-grace',
        '500ms',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      skewed(file),
    );
    expect(r.exitCode, r.all).toBe(0);
    const w = await db.rows<{ completed: boolean; held: boolean }>(
      `SELECT w.completed_at IS NOT NULL AS completed, l.expires_at > now() AS held FROM ${db.schema}.windows w JOIN ${db.schema}.leases l ON l.name = w.job WHERE w.job = 'skewed30d'`,
    );
    expect(w).toEqual([{ completed: true, held: false }]);
    const again = await runCli(
      ['run', ...conn(), '--name', 'skewed30d', '--window', 'w', '--', process.execPath, fixture('exit-with.mjs'), '0'],
      skewed(file),
    );
    expect(again.exitCode, again.all).toBe(0);
    expect(logLines(again.stderr).some((l) => l.msg === 'window already completed')).toBe(true);
  });

  it('a backward jump during a run is detected and recorded', async () => {
    const file = path.join(tmp, 'jump');
    writeFileSync(file, '+0s\n');
    const pidFile = path.join(tmp, 'jump.pid');
    const run = startCli(
      [
        'run',
        ...conn(),
        '--name',
        'jumpy',
        '--window',
        'w',
        '--ttl',
        '3s',
        '--kill-grace',
        '500ms',
        '--',
        process.execPath,
        fixture('forever.mjs'),
        pidFile,
      ],
      skewed(file),
    );
    await waitFor('child ready', () => existsSync(pidFile));
    writeFileSync(file, '-300s\n');
    await waitFor(
      'clock-jump event',
      async () =>
        (await db.rows(`SELECT 1 FROM ${db.schema}.events WHERE job = 'jumpy' AND kind = 'clock-jump'`)).length > 0,
      20_000,
      200,
    );
    run.kill('SIGTERM');
    const r = await run;
    expect(r.exitCode, r.all).toBe(143);
    const jump = logLines(r.stderr).find((l) => l.msg === 'wall clock jump detected');
    expect(Number(jump?.jumpMs)).toBeLessThan(-299_000);
    // The lease never depended on the wall clock: no loss, a clean release.
    expect(logLines(r.stderr).some((l) => l.msg === 'lease lost')).toBe(false);
    expect(logLines(r.stderr).some((l) => l.msg === 'lease released')).toBe(true);
  });
});
