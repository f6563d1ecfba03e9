// `leasejob run` end to end: real CLI, real children, real PostgreSQL.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execa } from 'execa';
import { BIN, fixture, isAlive, logLines, ROOT, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';
import { readPidFile } from '../helpers/signal.mjs';

const tmp = tempDir('leasejob-run-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

const base = (name: string): string[] => ['--database-url', db.url, '--schema', db.schema, '--name', name];

async function windowRow(job: string, key: string) {
  const rows = await db.rows<{
    attempts: number;
    completed_at: Date | null;
    outcome: string;
    exit_code: number | null;
    generation: string;
  }>(
    `SELECT attempts, completed_at, outcome, exit_code, generation FROM ${db.schema}.windows WHERE job = $1 AND window_key = $2`,
    [job, key],
  );
  return rows[0];
}

describe('leasejob run', () => {
  it('runs the child with the documented environment and no database URL', async () => {
    const out = path.join(tmp, 'env.json');
    const r = await runCli(
      ['run', ...base('env-job'), '--window', 'w1', '--', process.execPath, fixture('write-env.mjs'), out],
      {
        DATABASE_URL: 'postgres://sentinel:sentinel-secret@nowhere/db',
        PGPASSWORD: 'sentinel-pgpassword',
        PGAPPNAME: 'kept',
      },
    );
    expect(r.exitCode, r.all).toBe(0);
    const env = JSON.parse(readFileSync(out, 'utf8')) as Record<string, string>;
    expect(env.FENCE_TOKEN).toMatch(/^\d+$/);
    expect(env.IDEMPOTENCY_KEY).toBe('env-job:w1');
    expect(env.LEASEJOB_NAME).toBe('env-job');
    expect(env.LEASEJOB_WINDOW).toBe('w1');
    expect(env.LEASEJOB_ATTEMPT).toBe('1');
    expect(env.LEASEJOB_OWNER).toMatch(/^[^:]+:\d+:[0-9a-f]+$/);
    expect(env.DATABASE_URL).toBeUndefined();
    expect(env.LEASEJOB_DATABASE_URL).toBeUndefined();
    expect(env.PGPASSWORD).toBeUndefined();
    expect(env.PGAPPNAME).toBe('kept');
    expect(env.LEASEJOB_REQUIRE_SHARED).toBe('1');
    const lease = await db.rows<{ generation: string; expires_at: Date; released_at: Date | null }>(
      `SELECT generation, expires_at, released_at FROM ${db.schema}.leases WHERE name = 'env-job'`,
    );
    expect(lease[0]?.generation).toBe(env.FENCE_TOKEN);
    expect(lease[0]?.released_at).not.toBeNull();
  });

  it('a leasejob inside the child, without the database, refuses a one-host store: exit 64 saying why', async () => {
    const inner = `${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} run --name inner --window w -- true; echo "inner=$?"`;
    const r = await runCli(['run', ...base('nest-job'), '--window', 'w1', '--', 'sh', '-c', inner], {
      XDG_STATE_HOME: tmp,
    });
    expect(r.exitCode, r.all).toBe(0);
    expect(r.stdout).toContain('inner=64');
    expect(r.stderr).toMatch(/this runs inside a leasejob child on PostgreSQL, which sets LEASEJOB_REQUIRE_SHARED/);
    // With --pass-database-url the inner one uses the same database.
    const passed = await runCli([
      'run',
      ...base('nest-job'),
      '--window',
      'w2',
      '--pass-database-url',
      '--',
      'sh',
      '-c',
      inner.replace('run --name inner', `run --schema ${db.schema} --name inner`),
    ]);
    expect(passed.stdout, passed.all).toContain('inner=0');
    expect(
      await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE job = 'inner' AND completed_at IS NOT NULL`),
    ).toHaveLength(1);
  });

  it('skips a completed window, and --rerun runs it again as attempt 2', async () => {
    const args = [...base('rerun-job'), '--window', '2026-01-01'];
    const first = await runCli(['run', ...args, '--', process.execPath, fixture('exit-with.mjs'), '0']);
    expect(first.exitCode, first.all).toBe(0);
    expect((await windowRow('rerun-job', '2026-01-01'))?.completed_at).not.toBeNull();

    const again = await runCli(['run', ...args, '--', process.execPath, fixture('exit-with.mjs'), '9']);
    expect(again.exitCode, again.all).toBe(0); // the child (which would exit 9) did not run
    expect(logLines(again.stderr).some((l) => l.msg === 'window already completed')).toBe(true);
    expect((await windowRow('rerun-job', '2026-01-01'))?.attempts).toBe(1);

    const rerun = await runCli([
      'run',
      ...args,
      '--rerun',
      '--',
      process.execPath,
      fixture('write-env.mjs'),
      path.join(tmp, 'rerun.json'),
    ]);
    expect(rerun.exitCode, rerun.all).toBe(0);
    expect(JSON.parse(readFileSync(path.join(tmp, 'rerun.json'), 'utf8')).LEASEJOB_ATTEMPT).toBe('2');
    const w = await windowRow('rerun-job', '2026-01-01');
    expect(w?.attempts).toBe(2);
    expect(w?.outcome).toBe('completed');
  });

  it('passes a failing exit code through, leaves the window open, and resumes it as attempt 2', async () => {
    const args = [...base('fail-job'), '--window', 'w'];
    const failed = await runCli(['run', ...args, '--', process.execPath, fixture('exit-with.mjs'), '3']);
    expect(failed.exitCode, failed.all).toBe(3);
    let w = await windowRow('fail-job', 'w');
    expect(w?.completed_at).toBeNull();
    expect(w?.outcome).toBe('failed');
    expect(w?.exit_code).toBe(3);

    const retry = await runCli([
      'run',
      ...args,
      '--',
      process.execPath,
      fixture('write-env.mjs'),
      path.join(tmp, 'retry.json'),
    ]);
    expect(retry.exitCode, retry.all).toBe(0);
    expect(JSON.parse(readFileSync(path.join(tmp, 'retry.json'), 'utf8')).LEASEJOB_ATTEMPT).toBe('2');
    w = await windowRow('fail-job', 'w');
    expect(w?.attempts).toBe(2);
    expect(w?.completed_at).not.toBeNull();
  });

  it('derives the window from --scheduled-time with offset and format', async () => {
    const out = path.join(tmp, 'sched.json');
    const r = await runCli([
      'run',
      ...base('close-day'),
      '--schedule',
      '5 0 * * *',
      '--tz',
      'America/Sao_Paulo',
      '--window-from-schedule',
      '--scheduled-time',
      '2026-11-30T00:05:00-03:00',
      '--window-offset',
      '-P1D',
      '--window-format',
      'yyyy-MM-dd',
      '--',
      process.execPath,
      fixture('write-env.mjs'),
      out,
    ]);
    expect(r.exitCode, r.all).toBe(0);
    const env = JSON.parse(readFileSync(out, 'utf8')) as Record<string, string>;
    expect(env.LEASEJOB_WINDOW).toBe('2026-11-29');
    expect(env.IDEMPOTENCY_KEY).toBe('close-day:2026-11-29');
    expect(new Date(env.LEASEJOB_SCHEDULED_AT!).toISOString()).toBe('2026-11-30T03:05:00.000Z');
    const jobs = await db.rows<{ schedule: string; tz: string }>(
      `SELECT schedule, tz FROM ${db.schema}.jobs WHERE name = 'close-day'`,
    );
    expect(jobs[0]).toEqual({ schedule: '5 0 * * *', tz: 'America/Sao_Paulo' });
  });

  it('takes the occurrence from the Kubernetes JOB_NAME, so a late retry maps to the same window', async () => {
    // 29409125 unix minutes = 2025-12-01T00:05:00Z; the pod starts hours later.
    const args = ['run', ...base('k8s-job'), '--schedule', '5 0 * * *', '--window-from-schedule'];
    const k8s = { JOB_NAME: 'k8s-job-29409125', KUBERNETES_SERVICE_HOST: '10.0.0.1' };
    const first = await runCli([...args, '--', process.execPath, fixture('exit-with.mjs'), '0'], k8s);
    expect(first.exitCode, first.all).toBe(0);
    const rows = await db.rows<{ window_key: string }>(
      `SELECT window_key FROM ${db.schema}.windows WHERE job = 'k8s-job'`,
    );
    expect(rows.map((r) => r.window_key)).toEqual(['2025-12-01T00:05:00Z']);
    const dup = await runCli([...args, '--', process.execPath, fixture('exit-with.mjs'), '7'], k8s);
    expect(dup.exitCode, dup.all).toBe(0);
    expect(logLines(dup.stderr).some((l) => l.msg === 'window already completed')).toBe(true);
  });

  it('refuses a JOB_NAME minute that is no tick of --schedule in --tz (a CronJob timeZone unlike --tz): exit 64, nothing written', async () => {
    // 29409125 unix minutes = 2025-12-01T00:05:00Z: a tick in UTC, 21:05 the day before in Sao Paulo.
    const r = await runCli(
      [
        'run',
        ...base('k8s-tz'),
        '--schedule',
        '5 0 * * *',
        '--tz',
        'America/Sao_Paulo',
        '--window-from-schedule',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      { JOB_NAME: 'k8s-tz-29409125', KUBERNETES_SERVICE_HOST: '10.0.0.1' },
    );
    expect(r.exitCode, r.all).toBe(64);
    expect(r.stderr.trim()).toMatch(
      /^leasejob: the Kubernetes JOB_NAME k8s-tz-29409125 names the scheduled minute 2025-11-30T21:05:00-03:00, which is not an occurrence .* give the same one as `--tz`/,
    );
    expect(await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE job = 'k8s-tz'`)).toHaveLength(0);
    expect(await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'k8s-tz'`)).toHaveLength(0);
  });

  it("warns when the wall clock's latest occurrence is hours old (cron firing in another zone than --tz), not when it is current", async () => {
    const threeHoursAgo = new Date(Date.now() - 3 * 3600_000);
    const late = await runCli([
      'run',
      ...base('tz-late'),
      '--schedule',
      `${threeHoursAgo.getUTCMinutes()} ${threeHoursAgo.getUTCHours()} * * *`,
      '--window-from-schedule',
      '--',
      process.execPath,
      fixture('exit-with.mjs'),
      '0',
    ]);
    expect(late.exitCode, late.all).toBe(0);
    const warned = logLines(late.stderr).filter((l) => l.level === 'warn');
    expect(warned.map((l) => l.msg)).toEqual([
      expect.stringMatching(
        /^the latest occurrence of --schedule in UTC is 1(79|80|81) min old: if cron fires this job in another time zone \(the host's, or CRON_TZ\), give that zone as --tz$/,
      ),
    ]);
    const current = await runCli([
      'run',
      ...base('tz-current'),
      '--schedule',
      '* * * * *',
      '--window-from-schedule',
      '--',
      process.execPath,
      fixture('exit-with.mjs'),
      '0',
    ]);
    expect(current.exitCode, current.all).toBe(0);
    expect(logLines(current.stderr).filter((l) => l.level === 'warn')).toEqual([]);
  });

  it('one occurrence is one window whatever the name of UTC: a crontab with the default --tz, a CronJob with Etc/UTC', async () => {
    const minute = Math.floor(Date.now() / 60_000) - 1;
    const at = new Date(minute * 60_000).toISOString();
    const args = (tz: string[]) => [
      'run',
      ...base('utc-names'),
      '--schedule',
      '* * * * *',
      ...tz,
      '--window-from-schedule',
      '--scheduled-time',
      at,
      '--',
      'sh',
      '-c',
      'echo "ran $IDEMPOTENCY_KEY"',
    ];
    const crontab = await runCli(args([]));
    expect(crontab.exitCode, crontab.all).toBe(0);
    const k8s = await runCli(args(['--tz', 'Etc/UTC']), {
      JOB_NAME: `utc-names-${minute}`,
      KUBERNETES_SERVICE_HOST: '10.0.0.1',
    });
    expect(k8s.exitCode, k8s.all).toBe(0);
    expect(crontab.stdout.trim()).toBe(`ran utc-names:${at.replace('.000Z', 'Z')}`);
    expect(k8s.stdout).toBe('');
    expect(logLines(k8s.stderr).some((l) => l.msg === 'window already completed')).toBe(true);
    expect(await db.rows(`SELECT window_key FROM ${db.schema}.windows WHERE job = 'utc-names'`)).toHaveLength(1);
  });

  it('a short --ttl alone works: the default kill grace shrinks to fit it', async () => {
    const r = await runCli([
      'run',
      ...base('short-ttl'),
      '--window',
      'w',
      '--ttl',
      '5s',
      '--log-level',
      'debug',
      '--',
      process.execPath,
      fixture('exit-with.mjs'),
      '0',
    ]);
    expect(r.exitCode, r.all).toBe(0);
    const tooShort = await runCli([
      'run',
      ...base('short-ttl'),
      '--window',
      'w2',
      '--ttl',
      '5s',
      '--kill-grace',
      '10s',
      '--',
      process.execPath,
      fixture('exit-with.mjs'),
      '0',
    ]);
    expect(tooShort.exitCode, tooShort.all).toBe(64);
  });

  it('a working directory removed under it: exit 64, one line, no lease taken', async () => {
    const gone = path.join(tmp, 'gone-cwd');
    const cmd = `mkdir -p ${gone} && cd ${gone} && rmdir ${gone} && exec ${process.execPath} ${path.join(ROOT, 'bin', 'leasejob.js')} run --database-url '${db.url}' --schema ${db.schema} --name gone-cwd --window w -- true`;
    const r = await execa('bash', ['-c', cmd], { reject: false });
    expect(r.exitCode, r.stderr).toBe(64);
    expect(r.stderr.trim()).toBe(
      'leasejob: the current directory no longer exists (ENOENT); cd to one that does and run again',
    );
    expect(await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'gone-cwd'`)).toHaveLength(0);
  });

  it('ignores JOB_NAME outside Kubernetes: a CI system sets it too (Jenkins), maybe ending in digits', async () => {
    const r = await runCli(
      [
        'run',
        ...base('ci-job'),
        '--schedule',
        '5 0 * * *',
        '--window-from-schedule',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      { JOB_NAME: 'nightly-29409125', KUBERNETES_SERVICE_HOST: undefined },
    );
    expect(r.exitCode, r.all).toBe(0);
    expect(logLines(r.stderr).find((l) => l.msg === 'using store')?.occurrence).toBe('wall-clock');
    const rows = await db.rows<{ window_key: string }>(
      `SELECT window_key FROM ${db.schema}.windows WHERE job = 'ci-job'`,
    );
    expect(rows.map((x) => x.window_key)).not.toContain('2025-12-01T00:05:00Z');
  });

  it('refuses an occurrence that has not come yet: over an hour ahead of the host clock before connecting (nothing claimed), else by the database clock (not run, left open)', async () => {
    const ahead = new Date(Math.floor(Date.now() / 60_000) * 60_000 + 100 * 60_000);
    const viaFlag = await runCli([
      'run',
      ...base('ahead-job'),
      '--schedule',
      '* * * * *',
      '--window-from-schedule',
      '--scheduled-time',
      ahead.toISOString(),
      '--',
      process.execPath,
      fixture('exit-with.mjs'),
      '0',
    ]);
    expect(viaFlag.exitCode, viaFlag.all).toBe(64);
    expect(viaFlag.stderr).toMatch(/^leasejob: `--scheduled-time` \S+ names an occurrence that has not come yet/m);
    const viaName = await runCli(
      [
        'run',
        ...base('ahead-name'),
        '--schedule',
        '* * * * *',
        '--window-from-schedule',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      { JOB_NAME: `ahead-name-${ahead.getTime() / 60_000}`, KUBERNETES_SERVICE_HOST: '10.0.0.1' },
    );
    expect(viaName.exitCode, viaName.all).toBe(64);
    expect(viaName.stderr).toMatch(
      /^leasejob: the Kubernetes JOB_NAME ahead-name-\d+ names an occurrence that has not come yet/m,
    );
    expect(viaName.stderr).toMatch(/Use a literal `--window` to run something ahead on purpose/);
    expect(await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE job = 'ahead-name'`)).toHaveLength(0);
    // Within the hour the host clock may just be behind the controller's: the database's decides.
    const soon = new Date(Math.floor(Date.now() / 60_000) * 60_000 + 10 * 60_000);
    const nameSoon = await runCli(
      [
        'run',
        ...base('ahead-soon'),
        '--schedule',
        '* * * * *',
        '--window-from-schedule',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '0',
      ],
      { JOB_NAME: `ahead-soon-${soon.getTime() / 60_000}`, KUBERNETES_SERVICE_HOST: '10.0.0.1' },
    );
    expect(nameSoon.exitCode, nameSoon.all).toBe(75);
    expect(logLines(nameSoon.stderr).find((l) => l.level === 'error')?.msg).toMatch(
      /^occurrence not due by the database clock/,
    );
    expect(
      await db.rows(`SELECT outcome FROM ${db.schema}.windows WHERE job = 'ahead-soon' AND completed_at IS NULL`),
    ).toEqual([{ outcome: 'failed' }]);
    // Already a literal window: the advice is to leave the time out, not to use what was used.
    const literal = await runCli([
      'run',
      ...base('ahead-job'),
      '--window',
      'early',
      '--scheduled-time',
      ahead.toISOString(),
      '--',
      'true',
    ]);
    expect(literal.exitCode, literal.all).toBe(64);
    expect(literal.stderr).toMatch(/With a literal `--window`, leave `--scheduled-time` out to run it now/);
    expect(literal.stderr).not.toMatch(/Use a literal `--window`/);
    expect(await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE job = 'ahead-job'`)).toHaveLength(0);
  });

  it('records a window older than --max-delay as missed and does not run it', async () => {
    const r = await runCli([
      'run',
      ...base('late-job'),
      '--window-from-schedule',
      '--schedule',
      '0 * * * *',
      '--scheduled-time',
      '2020-01-01T00:00:00Z',
      '--max-delay',
      '10m',
      '--',
      process.execPath,
      fixture('exit-with.mjs'),
      '5',
    ]);
    expect(r.exitCode, r.all).toBe(0);
    expect(logLines(r.stderr).some((l) => l.msg === 'window missed')).toBe(true);
    const w = await windowRow('late-job', '2020-01-01T00:00:00Z');
    expect(w?.outcome).toBe('missed');
    const ev = await db.rows<{ kind: string }>(`SELECT kind FROM ${db.schema}.events WHERE job = 'late-job'`);
    expect(ev.map((e) => e.kind)).toEqual(['window-missed']);
  });

  it('runs plain mutual exclusion without a window ledger', async () => {
    const r = await runCli(['run', ...base('mutex-only'), '--', process.execPath, fixture('exit-with.mjs'), '0']);
    expect(r.exitCode, r.all).toBe(0);
    expect(await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE job = 'mutex-only'`)).toHaveLength(0);
    const again = await runCli(['run', ...base('mutex-only'), '--', process.execPath, fixture('exit-with.mjs'), '0']);
    expect(again.exitCode).toBe(0);
    const lease = await db.rows<{ generation: string }>(
      `SELECT generation FROM ${db.schema}.leases WHERE name = 'mutex-only'`,
    );
    expect(lease[0]?.generation).toBe('2'); // released, never deleted: generations keep growing
  });

  it('warns once a run has passed half its schedule interval (30 s of an every-minute job), and still completes', async () => {
    const r = await runCli(
      ['run', ...base('half-interval'), '--schedule', '* * * * *', '--window-from-schedule', '--', 'sleep', '31'],
      {},
      { timeoutMs: 90_000 },
    );
    expect(r.exitCode, r.all).toBe(0);
    const warned = logLines(r.stderr).filter((l) => l.msg === 'run passed half the schedule interval');
    expect(warned, r.stderr).toHaveLength(1);
    expect(warned[0]?.halfIntervalMs).toBe(30_000);
    const quick = await runCli([
      'run',
      ...base('half-interval-quick'),
      '--schedule',
      '* * * * *',
      '--window-from-schedule',
      '--',
      'true',
    ]);
    expect(quick.exitCode, quick.all).toBe(0);
    expect(logLines(quick.stderr).some((l) => l.msg === 'run passed half the schedule interval')).toBe(false);
  }, 120_000);

  it('exits 124 when --max-runtime is exceeded, stopping the child', async () => {
    const pidFile = path.join(tmp, 'maxrt.pid');
    const r = await runCli([
      'run',
      ...base('slow-job'),
      '--window',
      'w',
      '--ttl',
      '6s',
      '--kill-grace',
      '1s',
      '--max-runtime',
      '1s',
      '--',
      process.execPath,
      fixture('trap-term.mjs'),
      pidFile,
    ]);
    expect(r.exitCode, r.all).toBe(124);
    expect(readFileSync(pidFile, 'utf8')).toContain('SIGTERM');
    expect((await windowRow('slow-job', 'w'))?.completed_at).toBeNull();
  });

  it('forwards SIGTERM to the child, releases the lease and exits 143', async () => {
    const pidFile = path.join(tmp, 'term.pid');
    const p = startCli([
      'run',
      ...base('term-job'),
      '--window',
      'w',
      '--ttl',
      '30s',
      '--',
      process.execPath,
      fixture('forever.mjs'),
      pidFile,
    ]);
    await waitFor('child ready', () => {
      try {
        return readFileSync(pidFile, 'utf8').length > 0;
      } catch {
        return false;
      }
    });
    p.kill('SIGTERM');
    const r = await p;
    expect(r.exitCode, r.all).toBe(143);
    const lease = await db.rows<{ released: boolean }>(
      `SELECT released_at IS NOT NULL AND expires_at <= now() AS released FROM ${db.schema}.leases WHERE name = 'term-job'`,
    );
    expect(lease[0]?.released).toBe(true);
    const w = await windowRow('term-job', 'w');
    expect(w?.completed_at).toBeNull();
    expect(w?.exit_code).toBe(143);
  });

  it('a child that exits 0 after a forwarded SIGTERM did not complete its window: exit 143, window open', async () => {
    const ready = path.join(tmp, 'trap0.ready');
    const p = startCli([
      'run',
      ...base('trap-zero'),
      '--window',
      'w',
      '--ttl',
      '30s',
      '--',
      'sh',
      '-c',
      `trap 'exit 0' TERM; touch ${ready}; while :; do sleep 0.05; done`,
    ]);
    await waitFor('child ready', () => {
      try {
        readFileSync(ready);
        return true;
      } catch {
        return false;
      }
    });
    p.kill('SIGTERM');
    const r = await p;
    expect(r.exitCode, r.all).toBe(143);
    const w = await windowRow('trap-zero', 'w');
    expect(w?.completed_at).toBeNull();
    expect(w?.outcome).toBe('failed');
  });
});

describe('what the child started goes with it', () => {
  const grandchild = (pidFile: string): number => {
    const pid = readPidFile(pidFile);
    if (pid === undefined) throw new Error(`no whole pid in ${pidFile}`);
    return pid;
  };
  const published = (pidFile: string) => () => {
    try {
      return readFileSync(pidFile, 'utf8').length > 0;
    } catch {
      return false;
    }
  };
  const msgs = (stderr: string): string[] => logLines(stderr).map((l) => String(l.msg));

  it('SIGTERM: a grandchild that ignores it is killed after the grace, before the lease is released', async () => {
    const pidFile = path.join(tmp, 'gc-term.pid');
    const p = startCli([
      'run',
      ...base('gc-term'),
      '--window',
      'w',
      '--ttl',
      '30s',
      '--kill-grace',
      '1s',
      '--',
      process.execPath,
      fixture('spawn-grandchild.mjs'),
      pidFile,
      'ignore-sigterm',
    ]);
    await waitFor('grandchild ready', published(pidFile));
    p.kill('SIGTERM');
    const r = await p;
    expect(r.exitCode, r.all).toBe(143);
    expect(isAlive(grandchild(pidFile))).toBe(false);
    const order = msgs(r.stderr);
    expect(order.indexOf('child process group gone')).toBeGreaterThan(order.indexOf('child exited'));
    expect(order.indexOf('lease released')).toBeGreaterThan(order.indexOf('child process group gone'));
    expect((await windowRow('gc-term', 'w'))?.outcome).toBe('failed');
  });

  it('--max-runtime: the grandchild is gone too, so the runtime is bounded', async () => {
    const pidFile = path.join(tmp, 'gc-maxrt.pid');
    const r = await runCli([
      'run',
      ...base('gc-maxrt'),
      '--window',
      'w',
      '--ttl',
      '30s',
      '--kill-grace',
      '1s',
      '--max-runtime',
      '2s',
      '--',
      process.execPath,
      fixture('spawn-grandchild.mjs'),
      pidFile,
      'ignore-sigterm',
    ]);
    expect(r.exitCode, r.all).toBe(124);
    expect(isAlive(grandchild(pidFile))).toBe(false);
  });

  it('a lost lease: the grandchild is gone before the runner exits 75, not left working beside the next owner', async () => {
    const pidFile = path.join(tmp, 'gc-lost.pid');
    const p = startCli([
      'run',
      ...base('gc-lost'),
      '--window',
      'w',
      '--ttl',
      '3s',
      '--kill-grace',
      '1s',
      '--',
      process.execPath,
      fixture('spawn-grandchild.mjs'),
      pidFile,
      'ignore-sigterm',
    ]);
    await waitFor('grandchild ready', published(pidFile));
    const released = await runCli([
      'release',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--name',
      'gc-lost',
      '--force',
    ]);
    expect(released.exitCode, released.all).toBe(0);
    const r = await p;
    expect(r.exitCode, r.all).toBe(75);
    expect(isAlive(grandchild(pidFile))).toBe(false);
  });

  it.each([
    ['stops on SIGTERM', 'gc-exit0', undefined],
    ['ignores SIGTERM', 'gc-exit0-ignore', 'ignore-sigterm'],
  ])('a child that exits 0 leaving a process that %s: stopped, then the window completes', async (_what, job, kind) => {
    const pidFile = path.join(tmp, `${job}.pid`);
    const r = await runCli([
      'run',
      ...base(job),
      '--window',
      'w',
      '--ttl',
      '30s',
      '--kill-grace',
      '1s',
      '--',
      process.execPath,
      fixture('spawn-grandchild.mjs'),
      pidFile,
      kind ?? 'default',
      'exit',
    ]);
    expect(r.exitCode, r.all).toBe(0);
    expect(isAlive(grandchild(pidFile))).toBe(false);
    expect(msgs(r.stderr)).toContain('child exited but left processes in its group; stopping them');
    expect((await windowRow(job, 'w'))?.outcome).toBe('completed');
  });

  it('a command that cannot be started: exit 127 or 126 with a log line saying why, recorded on the window', async () => {
    const missing = await runCli(['run', ...base('no-cmd'), '--window', 'w', '--', '/no/such/command']);
    expect(missing.exitCode, missing.all).toBe(127);
    expect(logLines(missing.stderr).find((l) => l.level === 'error')?.msg).toBe(
      'Cannot run `/no/such/command`: no such file.',
    );
    expect((await windowRow('no-cmd', 'w'))?.exit_code).toBe(127);
    const notExecutable = await runCli(['run', ...base('no-exec'), '--window', 'w', '--', fixture('forever.mjs')]);
    expect(notExecutable.exitCode, notExecutable.all).toBe(126);
    expect(logLines(notExecutable.stderr).find((l) => l.level === 'error')?.msg).toMatch(
      /^Cannot run `.*forever\.mjs`: not an executable file\.$/,
    );
  });
});
