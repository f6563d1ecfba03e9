// `run --on-busy replace` (issue 17), in both stores, with real CLI processes: a run of a later
// occurrence asks the holder of an earlier one to stop through the lease; the holder stops its
// child, records its window `replaced` (left open) and releases; the new run takes the lease. The
// same window is never replaced; a holder that cannot yield bounds the wait (exit 75); a SIGKILLed
// holder is taken over at expiry as on a lost lease. Order comes from logs and events, not time.
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fixture, isAlive, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { bothStores, NO_DB_ENV } from '../helpers/both-stores.js';
import { tempDir } from '../helpers/temp.js';
import { readPidFile, signalPid } from '../helpers/signal.mjs';

const tmp = tempDir('leasejob-replace-');
const noDb = NO_DB_ENV;
const { stores } = bothStores('leasejob-replace-state-');

// A holder's lease must not expire on its own while a test looks at it: on a busy 2-core machine
// (the chaos suite beside it) a 3 s TTL once let a holder stop its child and lose its lease
// before the contender arrived. It sees a replace request at its next renewal (TTL/3 = 5 s).
const HOLDER_TTL = '15s';

const HOUR0 = '2026-01-01T00:00:00Z';
const HOUR1 = '2026-01-01T01:00:00Z';
const KEY0 = '2026-01-01T00:00Z';
const KEY1 = '2026-01-01T01:00Z';

interface Event {
  kind: string;
  window: string | null;
  generation: string | null;
  detail: Record<string, unknown>;
}

describe.each(stores)('--on-busy replace in %s', (store, conn) => {
  const tag = store === 'PostgreSQL' ? 'pg' : 'lite';
  /** A run of the hourly occurrence at `at` (the window key is the occurrence, UTC). */
  const run = (job: string, at: string, extra: string[], child: string[]) =>
    startCli(
      [
        'run',
        ...conn(),
        '--name',
        job,
        '--schedule',
        '0 * * * *',
        '--window-from-schedule',
        '--scheduled-time',
        at,
        '--window-format',
        "yyyy-MM-dd'T'HH:mm'Z'",
        '--tz',
        'UTC',
        ...extra,
        '--',
        process.execPath,
        ...child,
      ],
      noDb,
    );
  const history = async (job: string, key: string): Promise<Event[]> => {
    const r = await runCli(['history', ...conn(), '--name', job, '--window', key, '--json', '--limit', '200'], noDb);
    expect(r.exitCode, r.all).toBe(0);
    return JSON.parse(r.stdout) as Event[];
  };
  const pidIn = (file: string) => waitFor(`pid in ${file}`, () => readPidFile(file));

  it('stops an earlier occurrence (child SIGTERMed), records it replaced and open; the new occurrence runs; the same window is never replaced', async () => {
    const job = `replace-${tag}`;
    const pidFile = path.join(tmp, `${job}.pid`);
    const holder = run(job, HOUR0, ['--ttl', HOLDER_TTL], [fixture('forever.mjs'), pidFile]);
    const child = await pidIn(pidFile);

    // The same window: never replaced; the run skips as busy (exit 0) and the holder goes on.
    const same = await run(job, HOUR0, ['--on-busy', 'replace'], [fixture('exit-with.mjs'), '0']);
    expect(same.exitCode, same.all).toBe(0);
    expect(
      logLines(same.stderr).some((l) => String(l.msg).startsWith('lease busy with this or a later occurrence')),
    ).toBe(true);
    expect(isAlive(child)).toBe(true);

    const next = await run(job, HOUR1, ['--on-busy', 'replace'], [fixture('exit-with.mjs'), '0']);
    const old = await holder;
    expect(next.exitCode, next.all).toBe(0);
    expect(old.exitCode, old.all).toBe(75);
    expect(logLines(old.stderr).some((l) => l.msg === 'replaced by a later occurrence; stopping the command')).toBe(
      true,
    );
    await waitFor('the old child to end', () => !isAlive(child));

    const oldEvents = await history(job, KEY0);
    const kinds = oldEvents.map((e) => e.kind);
    expect(kinds).toContain('replace-requested');
    expect(kinds).toContain('window-replaced');
    expect(kinds).not.toContain('window-completed');
    expect(oldEvents.find((e) => e.kind === 'replace-requested')!.detail).toMatchObject({ for_window: KEY1 });
    expect(oldEvents.find((e) => e.kind === 'window-replaced')!.detail).toMatchObject({ exit_code: 75 });
    expect((await history(job, KEY1)).map((e) => e.kind)).toContain('window-completed');

    // The replaced window stays open: a later run of it runs it.
    const again = await run(job, HOUR0, [], [fixture('exit-with.mjs'), '0']);
    expect(again.exitCode, again.all).toBe(0);
    expect((await history(job, KEY0)).map((e) => e.kind)).toContain('window-completed');
  });

  it('refuses --on-busy replace without an occurrence time (exit 64, nothing written)', async () => {
    const job = `replace-usage-${tag}`;
    const r = await runCli(
      ['run', ...conn(), '--name', job, '--window', 'w1', '--on-busy', 'replace', '--', process.execPath, '-e', ''],
      noDb,
    );
    expect(r.exitCode, r.all).toBe(64);
    expect(r.stderr).toContain('`--on-busy replace` needs one occurrence with a time');
    // Nothing written: the job was never registered.
    const h = await runCli(['history', ...conn(), '--name', job, '--json'], noDb);
    expect(h.stderr).toContain(`no job named "${job}"`);
  });

  it('a later occurrence is never replaced by an earlier one (not-earlier: skips as busy)', async () => {
    const job = `replace-later-${tag}`;
    const pidFile = path.join(tmp, `${job}.pid`);
    const holder = run(job, HOUR1, ['--ttl', HOLDER_TTL], [fixture('forever.mjs'), pidFile]);
    const child = await pidIn(pidFile);
    const earlier = await run(job, HOUR0, ['--on-busy', 'replace'], [fixture('exit-with.mjs'), '0']);
    expect(earlier.exitCode, earlier.all).toBe(0);
    expect(
      logLines(earlier.stderr).some((l) => String(l.msg).startsWith('lease busy with this or a later occurrence')),
      earlier.all,
    ).toBe(true);
    expect(isAlive(child)).toBe(true);
    signalPid(holder.pid!, 'SIGTERM');
    expect((await holder).exitCode).toBe(143);
    expect((await history(job, KEY0)).map((e) => e.kind)).not.toContain('window-claimed');
  });

  it('a child that ignores SIGTERM is SIGKILLed after the grace; the lease then moves', async () => {
    const job = `replace-stubborn-${tag}`;
    const pidFile = path.join(tmp, `${job}.pid`);
    const holder = run(
      job,
      HOUR0,
      ['--ttl', HOLDER_TTL, '--kill-grace', '1s'],
      [fixture('ignore-sigterm.mjs'), pidFile],
    );
    const child = await pidIn(pidFile);
    const next = await run(job, HOUR1, ['--on-busy', 'replace'], [fixture('exit-with.mjs'), '0']);
    expect(next.exitCode, next.all).toBe(0);
    expect((await holder).exitCode).toBe(75);
    await waitFor('the stubborn child to be killed', () => !isAlive(child));
    expect((await history(job, KEY0)).map((e) => e.kind)).toContain('window-replaced');
  });

  it('a holder that cannot yield (SIGSTOPped): the wait is bounded by --wait-timeout, exit 75', async () => {
    const job = `replace-stopped-${tag}`;
    const pidFile = path.join(tmp, `${job}.pid`);
    const holder = run(job, HOUR0, ['--ttl', '60s'], [fixture('forever.mjs'), pidFile]);
    await pidIn(pidFile);
    signalPid(holder.pid!, 'SIGSTOP');
    try {
      const next = await run(
        job,
        HOUR1,
        ['--on-busy', 'replace', '--wait-timeout', '1s'],
        [fixture('exit-with.mjs'), '0'],
      );
      expect(next.exitCode, next.all).toBe(75);
      expect((await history(job, KEY1)).map((e) => e.kind)).not.toContain('window-claimed');
    } finally {
      signalPid(holder.pid!, 'SIGCONT');
    }
    signalPid(holder.pid!, 'SIGTERM');
    await holder;
  });

  it('a SIGKILLed holder is taken over at expiry, as on a lost lease', async () => {
    const job = `replace-killed-${tag}`;
    const pidFile = path.join(tmp, `${job}.pid`);
    const holder = run(job, HOUR0, ['--ttl', '3s'], [fixture('forever.mjs'), pidFile]);
    const child = await pidIn(pidFile);
    signalPid(holder.pid!, 'SIGKILL');
    await holder;
    const next = await run(job, HOUR1, ['--on-busy', 'replace'], [fixture('exit-with.mjs'), '0']);
    // Its child may outlive it (or not): it is no part of what is asserted.
    if (isAlive(child)) {
      try {
        signalPid(child, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    expect(next.exitCode, next.all).toBe(0);
    expect((await history(job, KEY1)).map((e) => e.kind)).toContain('window-completed');
    const old = (await history(job, KEY0)).map((e) => e.kind);
    expect(old).not.toContain('window-replaced');
    expect(old).not.toContain('window-completed');
  });
});
