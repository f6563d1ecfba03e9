// A window marked ahead of its tick (`mark --window <in an hour> --skipped`) is final (its run
// skips) but never counts as a completion: not the last completion of `status`, of the status
// page, nor leasejob_last_completed_window_timestamp_seconds. In both stores (issue 18).
import { describe, expect, it } from 'vitest';
import { bothStores, NO_DB_ENV as noDb } from '../helpers/both-stores.js';
import { fixture, runCli, startExporter } from '../helpers/cli.js';

const { db, stores } = bothStores('leasejob-marks-');
const hourKey = (hours: number): string =>
  new Date((Math.floor(Date.now() / 3_600_000) + hours) * 3_600_000).toISOString().replace('.000Z', 'Z');

describe.each(stores)('a mark ahead of its tick in %s', (store, conn) => {
  it('is final, but not the last completion of status, the status page or the exporter', async () => {
    const job = ['--name', 'hourly', '--schedule', '0 * * * *', '--window-from-schedule'];
    const ran = hourKey(0);
    const ahead = hourKey(1);
    const run = await runCli(
      ['run', ...conn(), ...job, '--scheduled-time', ran, '--', process.execPath, fixture('exit-with.mjs'), '0'],
      noDb,
    );
    expect(run.exitCode, run.all).toBe(0);
    const before = JSON.parse((await runCli(['status', ...conn(), '--name', 'hourly', '--json'], noDb)).stdout).jobs[0];
    expect(before.lastWindow).toBe(ran);

    const mark = await runCli(
      ['mark', ...conn(), '--name', 'hourly', '--window', ahead, '--skipped', '--reason', 'maintenance'],
      noDb,
    );
    expect(mark.exitCode, mark.all).toBe(0);
    if (store === 'PostgreSQL') await db().rows(`SELECT ${db().schema}.rebuild_window_digest()`); // the same from the ledger

    const after = JSON.parse((await runCli(['status', ...conn(), '--name', 'hourly', '--json'], noDb)).stdout).jobs[0];
    expect(after.lastWindow).toBe(ran);
    expect(after.lastCompletedAt).toBe(before.lastCompletedAt);
    const exporter = await startExporter(conn(), noDb, { timeoutMs: 120_000 });
    try {
      const text = await (await fetch(`http://127.0.0.1:${exporter.port}/metrics`)).text();
      const line = text
        .split('\n')
        .find((l) => l.startsWith('leasejob_last_completed_window_timestamp_seconds{job="hourly"}'));
      expect(Number(line?.split(' ').at(-1)) * 1000).toBe(Date.parse(before.lastCompletedAt));
      const page = await (await fetch(`http://127.0.0.1:${exporter.port}/job?name=hourly`)).text();
      const last = /Last completed[\s\S]*?<code>([^<]*)<\/code>/.exec(page)?.[1];
      expect(last).toBe(ran);
    } finally {
      await exporter.stop();
    }
    // Final all the same: the run of that occurrence finds it done and skips.
    const later = await runCli(
      ['run', ...conn(), ...job, '--scheduled-time', ahead, '--', process.execPath, fixture('exit-with.mjs'), '7'],
      noDb,
    );
    expect(later.exitCode, later.all).toBe(0);
  });
});
