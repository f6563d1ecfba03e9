// Issue 20: every due occurrence within the lookback is judged, not only the latest; check,
// status and the exporter agree on what did not complete; failures log at warn; a done skip is
// an event and a counter; check's plugin exit codes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, scrapeOnce } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';

let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

const conn = (): string[] => ['--database-url', db.url, '--schema', db.schema];
const exitWith = (code: number): string[] => ['--', process.execPath, fixture('exit-with.mjs'), String(code)];

const scrape = (): Promise<string> => scrapeOnce(conn(), {}, { timeoutMs: 120_000 });

function metric(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

/**
 * The top of the hour `n` hours before the current one, as an ISO occurrence of `0 * * * *`.
 * Hourly rather than minutely: a test that straddles a tick sees one more due occurrence, and
 * the assertions allow for that one (the latest, then overdue).
 */
const HOUR_BASE = Math.floor(Date.now() / 3_600_000) * 3_600_000; // fixed: an hour passing mid-test moves nothing
function hoursAgo(n: number): string {
  const t = new Date(HOUR_BASE - n * 3_600_000);
  return t.toISOString().replace('.000Z', 'Z');
}

describe('due occurrences (issue 20)', () => {
  it('a failed occurrence and two no host ran are reported after a success: check, status and the exporter agree', async () => {
    const name = 'mj';
    const job = ['--name', name, '--schedule', '0 * * * *', '--window-from-schedule', '--alert-after', '1s'];
    // The scenario of the issue, on the current clock: failed, not run, not run, then succeeded.
    const failed = hoursAgo(4);
    const r1 = await runCli(['run', ...conn(), ...job, '--scheduled-time', failed, ...exitWith(3)]);
    expect(r1.exitCode, r1.all).toBe(3);
    for (const at of [hoursAgo(1), hoursAgo(0)]) {
      const r = await runCli(['run', ...conn(), ...job, '--scheduled-time', at, ...exitWith(0)]);
      expect(r.exitCode, r.all).toBe(0);
    }
    // Registered since just before the failed minute: earlier minutes were never expected of it.
    await db.rows(`UPDATE ${db.schema}.jobs SET created_at = $2::timestamptz - interval '1 second' WHERE name = $1`, [
      name,
      failed,
    ]);
    const missing = [failed, hoursAgo(3), hoursAgo(2)];

    const check = await runCli(['check', ...conn(), '--name', name]);
    expect(check.exitCode, check.all).toBe(2);
    expect(check.stdout).toContain(
      `CRITICAL ${name}: not-completed: 3 earlier due occurrences not completed: ${missing[0]} (failed), ${missing[1]} (no run), ${missing[2]} (no run)`,
    );
    // --json gives them as an array, not only inside the message.
    const checkJson = JSON.parse((await runCli(['check', ...conn(), '--name', name, '--json'])).stdout);
    const earlier = checkJson.problems.find((p: { kind: string }) => p.kind === 'not-completed');
    expect(earlier.count).toBe(3);
    expect(earlier.occurrences.map((o: { window: string; outcome: string }) => [o.window, o.outcome])).toEqual([
      [missing[0], 'failed'],
      [missing[1], 'no run'],
      [missing[2], 'no run'],
    ]);
    expect(earlier.occurrences[0]).toEqual(
      expect.objectContaining({ scheduledAt: expect.any(String), overdueSince: expect.any(String) }),
    );

    const status = JSON.parse((await runCli(['status', ...conn(), '--name', name, '--json'])).stdout);
    // The top of an hour passed since the runs: that new tick is overdue too (and listed last).
    const late = status.jobs[0].overdue ? 1 : 0;
    expect(
      status.jobs[0].notCompleted.slice(0, 3).map((o: { window: string; outcome: string }) => [o.window, o.outcome]),
    ).toEqual([
      [missing[0], 'failed'],
      [missing[1], 'no run'],
      [missing[2], 'no run'],
    ]);
    expect(status.jobs[0].notCompleted).toHaveLength(3 + late);
    const table = await runCli(['status', ...conn(), '--name', name, '--wide']);
    expect(table.stdout).toMatch(/NOT COMPLETED/);
    expect(table.stdout).toContain(`${3 + late} (oldest ${missing[0]})`);

    const text = await scrape();
    const overdue = metric(text, 'leasejob_window_overdue', `job="${name}"`)!;
    expect(metric(text, 'leasejob_due_occurrences_not_completed', `job="${name}"`)).toBe(3 + overdue);
    expect(metric(text, 'leasejob_failed_occurrences', `job="${name}"`)).toBe(1);

    // Completed later (a rerun by hand: --rerun, as the failed one is closed by run's default
    // budget, once per occurrence): no longer reported.
    for (const at of missing) {
      const r = await runCli(['run', ...conn(), ...job, '--scheduled-time', at, '--rerun', ...exitWith(0)]);
      expect(r.exitCode, r.all).toBe(0);
    }
    const healthy = await runCli(['check', ...conn(), '--name', name, '--json']);
    expect(JSON.parse(healthy.stdout).problems.filter((p: { kind: string }) => p.kind === 'not-completed')).toEqual([]);
    const after = await scrape();
    expect(metric(after, 'leasejob_due_occurrences_not_completed', `job="${name}"`)).toBe(
      metric(after, 'leasejob_window_overdue', `job="${name}"`),
    );
    expect(metric(after, 'leasejob_failed_occurrences', `job="${name}"`)).toBe(0);
  });

  it("a new job's failed first run, given an earlier --scheduled-time, is judged like any other occurrence", async () => {
    const name = 'daily1';
    const today = new Date();
    today.setUTCHours(0, 0, 0, 0);
    const job = ['--name', name, '--schedule', '0 0 * * *', '--window-from-schedule', '--alert-after', '1s'];
    const r = await runCli(['run', ...conn(), ...job, '--scheduled-time', today.toISOString(), ...exitWith(2)]);
    expect(r.exitCode, r.all).toBe(2);
    const status = JSON.parse((await runCli(['status', ...conn(), '--name', name, '--json'])).stdout);
    expect(status.jobs[0]).toMatchObject({ overdue: true, failedOccurrences: 1 });
    const check = await runCli(['check', ...conn(), '--name', name]);
    expect(check.exitCode, check.all).toBe(2);
    expect(check.stdout).toMatch(new RegExp(`^CRITICAL ${name}: overdue: window `, 'm'));
    const text = await scrape();
    expect(metric(text, 'leasejob_window_overdue', `job="${name}"`)).toBe(1);
    expect(metric(text, 'leasejob_due_occurrences_not_completed', `job="${name}"`)).toBe(1);
    expect(metric(text, 'leasejob_failed_occurrences', `job="${name}"`)).toBe(1);
  });

  it('--alert-lookback bounds how far back: an occurrence older than the lookback is no longer reported', async () => {
    const name = 'mj-lookback';
    const job = [
      '--name',
      name,
      '--schedule',
      '0 * * * *',
      '--window-from-schedule',
      '--alert-after',
      '1s',
      '--alert-lookback',
      '150m',
    ];
    const old = hoursAgo(4);
    const recent = hoursAgo(1);
    expect((await runCli(['run', ...conn(), ...job, '--scheduled-time', old, ...exitWith(3)])).exitCode).toBe(3);
    expect((await runCli(['run', ...conn(), ...job, '--scheduled-time', recent, ...exitWith(3)])).exitCode).toBe(3);
    expect((await runCli(['run', ...conn(), ...job, '--scheduled-time', hoursAgo(0), ...exitWith(0)])).exitCode).toBe(
      0,
    );
    await db.rows(`UPDATE ${db.schema}.jobs SET created_at = now() - interval '1 day' WHERE name = $1`, [name]);
    const status = JSON.parse((await runCli(['status', ...conn(), '--name', name, '--json'])).stdout);
    const windows = status.jobs[0].notCompleted.map((o: { window: string }) => o.window);
    expect(windows).toContain(recent);
    expect(windows).not.toContain(old);
    // Only the failure within the lookback pages (LeasejobRunFailed); the older one is check's.
    expect(status.jobs[0].failedOccurrences).toBe(1);
    // The failed window is still a failing one (WARNING from the first failure) besides.
    const check = await runCli(['check', ...conn(), '--name', name, '--json']);
    expect(check.exitCode, check.all).toBe(2);
    const kinds = JSON.parse(check.stdout).problems.map((p: { kind: string }) => p.kind);
    expect(kinds).toContain('not-completed');
    expect(kinds).toContain('failing');
  });

  it('a daily job that failed once is a WARNING from its first failure, not only at the next night', async () => {
    const name = 'nightly';
    const job = ['--name', name, '--schedule', '5 0 * * *', '--window-from-schedule'];
    // The latest 00:05 that has passed.
    const d = new Date();
    d.setUTCHours(0, 5, 0, 0);
    if (d.getTime() > Date.now()) d.setUTCDate(d.getUTCDate() - 1);
    const r = await runCli(['run', ...conn(), ...job, '--scheduled-time', d.toISOString(), ...exitWith(1)]);
    expect(r.exitCode, r.all).toBe(1);
    const check = await runCli(['check', ...conn(), '--name', name]);
    expect([1, 2], check.all).toContain(check.exitCode);
    expect(check.stdout).toMatch(/^WARNING nightly: failing: window \S+ failed 1 attempt \(last outcome failed\)$/m);
  });

  it('failures log at warn: a failed child is seen with --log-level warn; a success and a done skip print nothing there', async () => {
    const name = 'quiet';
    const warn = ['run', ...conn(), '--log-level', 'warn', '--name', name, '--window', 'w1'];
    const failed = await runCli([...warn, ...exitWith(3)]);
    expect(failed.exitCode).toBe(3);
    const lines = logLines(failed.stderr);
    // One warning line, the window's: `child exited` is below warn (a failed try that is then
    // retried must print nothing there).
    expect(lines.map((l) => l.msg)).toEqual(['window left open']);
    expect(lines[0]).toMatchObject({ level: 'warn', exitCode: 3 });
    const ok = await runCli([...warn, ...exitWith(0)]);
    expect(ok.exitCode, ok.all).toBe(0);
    expect(ok.stderr).toBe('');
    const skip = await runCli([...warn, ...exitWith(0)]);
    expect(skip.exitCode, skip.all).toBe(0);
    expect(skip.stderr).toBe('');
    // The done skip is an event, and a counter by host.
    const history = JSON.parse((await runCli(['history', ...conn(), '--name', name, '--json'])).stdout) as Array<{
      kind: string;
      window: string;
    }>;
    expect(history.filter((e) => e.kind === 'done-skip')).toEqual([expect.objectContaining({ window: 'w1' })]);
    expect(
      (await scrape())
        .split('\n')
        .filter((l) => l.startsWith(`leasejob_done_skips_total{job="${name}",`))
        .map((l) => Number(l.split(' ').at(-1))),
    ).toEqual([1]);
  });

  it('check exits 3 (UNKNOWN) when it has no answer: bad flags, an unreachable database', async () => {
    const bad = await runCli(['check', ...conn(), '--max-attempts', '0']);
    expect(bad.exitCode, bad.all).toBe(3);
    const unknownFlag = await runCli(['check', ...conn(), '--no-such-flag']);
    expect(unknownFlag.exitCode, unknownFlag.all).toBe(3);
    const down = await runCli(['check', '--database-url', 'postgres://u:p@127.0.0.1:1/x']);
    expect(down.exitCode, down.all).toBe(3);
    const json = await runCli(['check', '--json', '--database-url', 'postgres://u:p@127.0.0.1:1/x']);
    expect(json.exitCode).toBe(3);
    expect(JSON.parse(json.stdout)).toMatchObject({ error: { exitCode: 3 } });
    // The other commands keep their codes.
    expect((await runCli(['status', '--database-url', 'postgres://u:p@127.0.0.1:1/x'])).exitCode).toBe(69);
  });
});
