// Issue 27: a job made by `backfill --schedule` is judged. The backfill records the schedule in
// the registry as `run` does, expected from its range's first occurrence, so a backfill that
// stopped at a failed hour leaves that hour and the hours after it (never run) reported by
// check, status and the exporter. A job whose schedule its runs registered keeps it as they did.
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli, scrapeOnce } from '../helpers/cli.js';
import { bothStores, NO_DB_ENV } from '../helpers/both-stores.js';
import { tempDirPerTest } from '../helpers/temp.js';

const { stores } = bothStores('leasejob-backfill-registry-');
const newTmp = tempDirPerTest('leasejob-backfill-registry-run-');

const HOUR = 3_600_000;
/** Hourly occurrences, the last two hours ago at least: all past their grace, within a day's lookback. */
const H0 = Math.floor(Date.now() / HOUR) * HOUR - 6 * HOUR;
const W = (i: number): string => new Date(H0 + i * HOUR).toISOString().replace('.000Z', 'Z');

function metric(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

interface StatusJob {
  schedule: string | null;
  notCompletedCount: number;
  notCompleted: Array<{ window: string; outcome: string }>;
}

describe.each(stores)('backfill --schedule on %s', (_, store) => {
  it('records the schedule; the failed hour and the hours it left unrun are flagged', async () => {
    const job = 'backfilled-job';
    const counter = path.join(newTmp(), 'count');
    // The second occurrence fails; without --keep-going the backfill stops there.
    const child = [
      'sh',
      '-c',
      `n=$(cat ${counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > ${counter}; [ $n -ne 2 ]`,
    ];
    const bf = await runCli(
      ['backfill', ...store(), '--name', job, '--schedule', '0 * * * *', '--from', W(0), '--to', W(4), '--', ...child],
      NO_DB_ENV,
    );
    expect(bf.exitCode, bf.all).not.toBe(0);
    expect(bf.stdout).toMatch(/1 completed, 1 failed, 4 left open/);

    const status = JSON.parse((await runCli(['status', ...store(), '--name', job, '--json'], NO_DB_ENV)).stdout) as {
      jobs: StatusJob[];
    };
    const j = status.jobs[0]!;
    expect(j.schedule).toBe('0 * * * *');
    // W(1) failed, W(2)-W(4) never ran (and the hours after the range, due since, neither).
    const listed = j.notCompleted.map((o) => o.window);
    expect(listed.slice(0, 4)).toEqual([W(1), W(2), W(3), W(4)]);
    expect(j.notCompletedCount).toBeGreaterThanOrEqual(4);
    expect(j.notCompleted[0]!.outcome).toBe('failed');

    const check = await runCli(['check', ...store(), '--name', job], NO_DB_ENV);
    expect(check.exitCode, check.all).toBe(2);
    expect(check.stdout).toContain(W(2));

    const text = await scrapeOnce(store(), NO_DB_ENV, { timeoutMs: 120_000 });
    expect(metric(text, 'leasejob_due_occurrences_not_completed', `job="${job}"`)).toBeGreaterThanOrEqual(4);
  });

  it("leaves a registered job's schedule and its settings as its runs recorded them", async () => {
    const job = 'backfilled-registered';
    const run = await runCli(
      [
        'run',
        ...store(),
        '--name',
        job,
        '--schedule',
        '0 * * * *',
        '--window-from-schedule',
        '--alert-after',
        '30m',
        '--',
        'true',
      ],
      NO_DB_ENV,
    );
    expect(run.exitCode, run.all).toBe(0);
    const before = JSON.parse((await runCli(['status', ...store(), '--name', job, '--json'], NO_DB_ENV)).stdout);
    const bf = await runCli(
      ['backfill', ...store(), '--name', job, '--schedule', '0 * * * *', '--from', W(0), '--to', W(1), '--', 'true'],
      NO_DB_ENV,
    );
    expect(bf.exitCode, bf.all).toBe(0);
    const after = JSON.parse((await runCli(['status', ...store(), '--name', job, '--json'], NO_DB_ENV)).stdout);
    expect(after.jobs[0]).toMatchObject({ version: before.jobs[0].version, alertAfterMs: 30 * 60_000 });
  });
});
