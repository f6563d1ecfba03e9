// Issue 27: a crashed holder no longer looks alive. Once the runner holding a lease is SIGKILLed
// (its database session closes; on the embedded store, its process is gone on this boot),
// `status`, the status page and the next trigger say "holder gone", with when its lease expires;
// the trigger still waits the lease out (taking it before expiry is not safe), and says so.
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, startCli, startExporter, waitFor } from '../helpers/cli.js';
import { bothStores, NO_DB_ENV } from '../helpers/both-stores.js';
import { tempDirPerTest } from '../helpers/temp.js';

const { stores } = bothStores('leasejob-holder-gone-');
const newTmp = tempDirPerTest('leasejob-holder-gone-run-');

interface StatusJob {
  name: string;
  held: boolean;
  holderGone?: boolean;
  expiresInMs: number | null;
}

describe.each(stores)('a crashed holder on %s', (_, store) => {
  it('status, the page and the waiting trigger say the holder is gone; the lease is still waited out', async () => {
    const job = 'crashed-holder';
    const status = async (): Promise<StatusJob | undefined> => {
      const r = await runCli(['status', ...store(), '--name', job, '--json'], NO_DB_ENV);
      if (r.exitCode !== 0) return undefined;
      return (JSON.parse(r.stdout) as { jobs: StatusJob[] }).jobs[0];
    };
    const holder = startCli(
      [
        'run',
        ...store(),
        '--name',
        job,
        '--window',
        'w1',
        '--ttl',
        '10m',
        '--',
        process.execPath,
        fixture('wait-for-file.mjs'),
        path.join(newTmp(), 'never'),
        '120000',
      ],
      NO_DB_ENV,
    );
    await waitFor('the holder to hold the lease', async () => (await status())?.held === true);
    // Alive: not gone.
    expect((await status())?.holderGone).toBe(false);
    holder.kill('SIGKILL');
    await holder;

    const gone = await waitFor('status to see the holder gone', async () => {
      const j = await status();
      return j?.holderGone === true ? j : undefined;
    });
    expect(gone.held).toBe(true);
    expect(gone.expiresInMs).toBeGreaterThan(0);
    const text = await runCli(['status', ...store(), '--name', job], NO_DB_ENV);
    expect(text.stdout).toMatch(/holder gone, lease expires in \d/);

    const exporter = await startExporter(store(), NO_DB_ENV);
    try {
      const page = await (await fetch(`http://127.0.0.1:${exporter.port}/`)).text();
      expect(page).toMatch(/holder gone, lease expires in \d/);
      const jobPage = await (await fetch(`http://127.0.0.1:${exporter.port}/job?name=${job}`)).text();
      expect(jobPage).toMatch(/holder gone, lease expires in \d/);
    } finally {
      await exporter.stop();
    }

    // The next trigger: waits (here bounded by --wait-timeout), saying why and until when.
    const trigger = await runCli(
      [
        'run',
        ...store(),
        '--name',
        job,
        '--window',
        'w1',
        '--on-busy',
        'wait',
        '--wait-timeout',
        '300ms',
        '--',
        'true',
      ],
      NO_DB_ENV,
    );
    expect(trigger.exitCode, trigger.all).not.toBe(0);
    const waited = logLines(trigger.stderr).find((l) => l.msg === 'lease holder gone, waiting for its lease to expire');
    expect(waited, trigger.stderr).toMatchObject({ level: 'info', holderGone: true, holder: expect.any(String) });
    expect(Number(waited?.expiresInMs)).toBeGreaterThan(0);
    expect(Date.parse(String(waited?.expiresAt))).toBeGreaterThan(Date.now());
    // Not taken over before expiry: still the crashed holder's.
    expect((await status())?.holderGone).toBe(true);
  });
});
