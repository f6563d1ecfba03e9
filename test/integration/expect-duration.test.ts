// `run --expect-duration <min>..<max>` (issue 18): a run outside the bounds is a `check`
// warning, a metric and (in the chart) an alert; in both stores. Bad input is refused before
// anything is written.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { bothStores, NO_DB_ENV as noDb } from '../helpers/both-stores.js';
import { fixture, logLines, runCli, scrapeOnce, startCli, waitFor } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-expect-');
const { db, stores } = bothStores('leasejob-expect-');

const sleepThen = (ms: number, code = 0): string[] => [
  '--',
  process.execPath,
  fixture('sleep-then.mjs'),
  String(ms),
  String(code),
];

function metric(text: string, name: string, job: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{job="${job}"}`));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

describe.each(stores)('--expect-duration in %s', (_store, conn) => {
  const run = (job: string, window: string, expect: string, child: string[]) =>
    runCli(['run', ...conn(), '--name', job, '--window', window, '--expect-duration', expect, ...child], noDb);
  const check = (job: string) => runCli(['check', ...conn(), '--name', job], noDb);

  it('a run shorter than the minimum or longer than the maximum is a WARNING in check and a metric; one within is neither', async () => {
    expect((await run('short', 'w1', '5s..1h', sleepThen(0))).exitCode).toBe(0);
    expect((await run('long', 'w1', '..300ms', sleepThen(800))).exitCode).toBe(0);
    expect((await run('fine', 'w1', '1ms..1h', sleepThen(0))).exitCode).toBe(0);

    const short = await check('short');
    expect(short.exitCode, short.all).toBe(1);
    expect(short.stdout).toMatch(
      /^WARNING short: duration: window w1 ran \S+, shorter than --expect-duration's minimum \(5s\)$/m,
    );
    const long = await check('long');
    expect(long.exitCode, long.all).toBe(1);
    expect(long.stdout).toMatch(
      /^WARNING long: duration: window w1 ran \S+, longer than --expect-duration's maximum \(300ms\)$/m,
    );
    const fine = await check('fine');
    expect(fine.exitCode, fine.all).toBe(0);

    const text = await scrapeOnce(conn(), noDb, { timeoutMs: 120_000 });
    expect(metric(text, 'leasejob_duration_outside_expected', 'short')).toBe(1);
    expect(metric(text, 'leasejob_duration_outside_expected', 'long')).toBe(1);
    expect(metric(text, 'leasejob_duration_outside_expected', 'fine')).toBe(0);
    expect(metric(text, 'leasejob_expected_duration_min_seconds', 'short')).toBe(5);
    expect(metric(text, 'leasejob_expected_duration_max_seconds', 'short')).toBe(3600);
    expect(metric(text, 'leasejob_expected_duration_min_seconds', 'long')).toBeUndefined();
    expect(metric(text, 'leasejob_expected_duration_max_seconds', 'long')).toBe(0.3);

    // A later run within the bounds clears it; a window marked by hand ran nothing and is no run to judge.
    expect((await run('short', 'w2', '1ms..1h', sleepThen(0))).exitCode).toBe(0);
    expect((await check('short')).exitCode).toBe(0);
    expect((await runCli(['mark', ...conn(), '--name', 'long', '--window', 'w2', '--done'], noDb)).exitCode).toBe(0);
    expect((await check('long')).exitCode).toBe(0);
  });

  it('is refused (exit 64, nothing registered) unless it is <min>..<max> with min at most max', async () => {
    for (const bad of ['10m..1m', '..', '5m', 'abc..1m', '1m..2m..3m']) {
      const r = await run('bad-expect', 'w1', bad, sleepThen(0));
      expect(r.exitCode, `${bad}: ${r.all}`).toBe(64);
      expect(r.stderr).toContain('--expect-duration');
    }
    const status = JSON.parse((await runCli(['status', ...conn(), '--json'], noDb)).stdout) as {
      jobs: Array<{ name: string }>;
    };
    expect(status.jobs.map((j) => j.name)).not.toContain('bad-expect');
  });
});

describe('--expect-duration while a run is still going', () => {
  it('a run past the maximum is a WARNING before it ends', async () => {
    const conn = ['--database-url', db().url, '--schema', db().schema];
    const release = path.join(tmp, 'release-running');
    const p = startCli(
      [
        'run',
        ...conn,
        '--name',
        'running',
        '--window',
        'w1',
        '--expect-duration',
        '..100ms',
        '--',
        process.execPath,
        fixture('wait-for-file.mjs'),
        release,
        '120000',
      ],
      noDb,
      { timeoutMs: 180_000 },
    );
    try {
      const line = await waitFor(
        'check to say the run is past its maximum',
        async () => {
          const r = await runCli(['check', ...conn, '--name', 'running'], noDb);
          return /^WARNING running: duration: running for \S+, longer than --expect-duration's maximum \(100ms\)$/m.exec(
            r.stdout,
          )?.[0];
        },
        60_000,
        200,
      );
      expect(line).toBeDefined();
    } finally {
      writeFileSync(release, '');
      await p;
    }
  });
});

describe("the long-run warning follows --expect-duration's maximum, not half the interval", () => {
  const conn = stores[0]![1];
  const warnings = (stderr: string): unknown[] =>
    logLines(stderr)
      .filter((l) => l.level === 'warn')
      .map((l) => l.msg);
  const every = (job: string, expect: string, child: string[]) =>
    runCli(
      [
        'run',
        ...conn(),
        '--name',
        job,
        '--schedule',
        '* * * * *',
        '--window-from-schedule',
        '--expect-duration',
        expect,
        ...child,
      ],
      noDb,
      { timeoutMs: 90_000 },
    );

  it('a 31 s run of an every-minute job expected to take up to 45 s is silent; one past its 1 s maximum warns once', async () => {
    const [within, past] = await Promise.all([
      every('may-take-long', '..45s', sleepThen(31_000)),
      every('short-expected', '..1s', sleepThen(2_500)),
    ]);
    expect(within.exitCode, within.all).toBe(0);
    expect(warnings(within.stderr), within.stderr).toEqual([]);
    expect(past.exitCode, past.all).toBe(0);
    expect(warnings(past.stderr), past.stderr).toEqual(["run passed --expect-duration's maximum"]);
    expect(logLines(past.stderr).find((l) => l.level === 'warn')?.expectMaxMs).toBe(1_000);
  }, 120_000);
});
