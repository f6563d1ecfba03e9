// No child outlives its lease, whatever happens to leasejob (issue 20): the guard between
// leasejob and the child stops the child's group when leasejob is SIGKILLed (at any moment, its
// spawn included) or stopped past the lease's deadline. Real CLI, real processes; order comes
// from pid files and /proc, never from timing.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { BIN, isAlive, logLines, startCli, waitFor } from '../helpers/cli.js';
import { bothStores, NO_DB_ENV } from '../helpers/both-stores.js';
import { tempDir } from '../helpers/temp.js';
import { readPidFile, signalPid } from '../helpers/signal.mjs';

const tmp = tempDir('leasejob-guard-');
const { stores } = bothStores('leasejob-guard-state-');

/** SIGKILLs at spawn in the suite; LEASEJOB_TEST_SPAWN_KILLS=200 for the long run. */
const SPAWN_KILLS = Number(process.env.LEASEJOB_TEST_SPAWN_KILLS ?? 20);

/** A child that writes its pid (sh's, kept by exec) to `file`, then runs until stopped. */
const pidChild = (file: string): string[] => [
  'sh',
  '-c',
  `echo $$ > '${file}.tmp' && mv '${file}.tmp' '${file}'; exec sleep 600`,
];

const readPid = readPidFile;

/** The direct children of `pid` (its main thread's: the one that spawns). */
function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Polls as fast as the event loop turns (setImmediate), up to `limitMs`: to kill at the first sight of a process. */
async function firstSight<T>(probe: () => T | undefined, limitMs: number): Promise<T | undefined> {
  const start = Date.now();
  while (Date.now() - start < limitMs) {
    const v = probe();
    if (v !== undefined) return v;
    await new Promise((resolve) => setImmediate(resolve));
  }
  return undefined;
}

/** Whether `pid` is gone within a bound far above what a SIGTERMed `sleep` takes. */
async function goneWithin(pid: number): Promise<boolean> {
  try {
    await waitFor(`pid ${pid} to be gone`, () => !isAlive(pid), 10_000);
    return true;
  } catch {
    return false;
  }
}

function killQuietly(pid: number): void {
  try {
    signalPid(pid, 'SIGKILL');
  } catch {
    // gone meanwhile
  }
}

describe('a runner SIGKILLed at spawn', { timeout: 60_000 + SPAWN_KILLS * 5_000 }, () => {
  it(`leaves no orphan in ${SPAWN_KILLS} kills at the guard's or the child's first sight`, async () => {
    const state = path.join(tmp, 'spawn-kills.db');
    const orphans = new Set<number>();
    let childrenSeen = 0;
    for (let i = 0; i < SPAWN_KILLS; i++) {
      const pidFile = path.join(tmp, `spawn-kill-${i}.pid`);
      const runner = spawn(
        process.execPath,
        [
          BIN,
          'run',
          '--state-file',
          state,
          '--name',
          `spawn-kill-${i}`,
          '--log-level',
          'fatal',
          '--',
          ...pidChild(pidFile),
        ],
        { stdio: 'ignore', env: { ...process.env, ...NO_DB_ENV, XDG_STATE_HOME: tmp } as NodeJS.ProcessEnv },
      );
      const runnerGone = new Promise((resolve) => runner.once('exit', resolve));
      const pid = runner.pid!;
      // Three moments, in turn: the guard's first sight; the child's pid file; a few turns of the
      // loop after the guard's first sight (between its start and the child's).
      let guard: number | undefined;
      if (i % 3 === 1) {
        await firstSight(() => readPid(pidFile), 30_000);
        guard = childrenOf(pid)[0];
      } else {
        guard = await firstSight(() => childrenOf(pid)[0], 30_000);
        for (let turn = 0; i % 3 === 2 && turn < i % 7; turn++) await new Promise((r) => setImmediate(r));
      }
      runner.kill('SIGKILL');
      await runnerGone;
      // The guard stops the child's group (SIGTERM: the child goes at once), then goes itself.
      // Without one, the runner's direct child is the command: it must go too.
      for (const p of guard !== undefined ? [guard] : []) if (!(await goneWithin(p))) orphans.add(p);
      const child = readPid(pidFile);
      if (child === undefined) continue;
      childrenSeen += 1;
      if (!(await goneWithin(child))) orphans.add(child);
    }
    for (const p of orphans) killQuietly(p);
    expect([...orphans]).toEqual([]);
    // The kills at the child's pid file saw a child each time: the check looked at live children.
    expect(childrenSeen).toBeGreaterThanOrEqual(Math.floor(SPAWN_KILLS / 3));
  });
});

describe.each(stores)('a runner SIGSTOPped past its lease in %s', (store, conn) => {
  const tag = store === 'PostgreSQL' ? 'pg' : 'lite';
  // Short, on purpose: the first runner must lose its lease while stopped. The second's child
  // only looks and exits, so it needs no long lease.
  const TTL = ['--ttl', '6s', '--kill-grace', '1s'];
  const hourly = (at: string) => [
    '--schedule',
    '0 * * * *',
    '--window-from-schedule',
    '--scheduled-time',
    at,
    '--window-format',
    "yyyy-MM-dd'T'HH:mm'Z'",
    '--tz',
    'UTC',
  ];

  /** Runner A with a long child, stopped once the child runs; returns A, its child's pid. */
  async function stoppedHolder(
    job: string,
    extra: string[],
  ): Promise<{ a: ReturnType<typeof startCli>; child: number }> {
    const pidFile = path.join(tmp, `${job}-a.pid`);
    const a = startCli(['run', ...conn(), '--name', job, ...TTL, ...extra, '--', ...pidChild(pidFile)], NO_DB_ENV);
    const child = await waitFor(`A's child`, () => readPid(pidFile));
    signalPid(a.pid!, 'SIGSTOP');
    return { a, child };
  }

  /** Runner B's child: says whether A's child was alive when it started (kill -0: sh's own). */
  const witness = (childOfA: number, out: string): string[] => [
    'sh',
    '-c',
    `if kill -0 ${childOfA} 2>/dev/null; then echo alive; else echo gone; fi > '${out}'`,
  ];

  async function expectNoOverlap(job: string, extraA: string[], extraB: string[]): Promise<void> {
    const { a, child } = await stoppedHolder(job, extraA);
    const out = path.join(tmp, `${job}-b.out`);
    let b: ReturnType<typeof startCli> | undefined;
    try {
      b = startCli(['run', ...conn(), '--name', job, ...TTL, ...extraB, '--', ...witness(child, out)], NO_DB_ENV);
      const rb = await b;
      expect(rb.exitCode, rb.all).toBe(0);
      expect(readFileSync(out, 'utf8').trim()).toBe('gone');
      expect(isAlive(child)).toBe(false);
    } finally {
      signalPid(a.pid!, 'SIGCONT');
    }
    const ra = await a;
    // Woken, A finds its lease gone: exit 75, and its child was already stopped by the guard.
    expect(ra.exitCode, ra.all).toBe(75);
    expect(existsSync(out)).toBe(true);
    expect(logLines(ra.stderr).some((l) => l.msg === 'child exited')).toBe(true);
  }

  it('a plain takeover after expiry never starts its child while the first child lives', async () => {
    await expectNoOverlap(`stop-wait-${tag}`, [], ['--on-busy', 'wait', '--wait-timeout', '60s']);
  });

  it('--on-busy replace of a stopped holder never starts its child while the first child lives', async () => {
    const job = `stop-replace-${tag}`;
    await expectNoOverlap(job, hourly('2026-01-01T00:00:00Z'), [
      ...hourly('2026-01-01T01:00:00Z'),
      '--on-busy',
      'replace',
      '--wait-timeout',
      '60s',
    ]);
  });
});
