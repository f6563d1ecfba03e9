// Child supervision against real processes: exit codes, signals, env, grace kill, process group, parent death.
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { constants as osConstants, tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  buildSpawnArgs,
  parentDeathSignalSupport,
  SpawnError,
  startChild,
  type ChildHandle,
} from '../../src/lease/child.js';
import { FIXTURES, fixture, isAlive, waitFor } from '../helpers/wait.js';
import { readPidFile, signalPid } from '../helpers/signal.mjs';

const node = process.execPath;
const env = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

// Generous: these must pass on a busy 2-core machine.
const WAIT_LIMIT_MS = 15_000;
const POLL_MS = 20;
const TEST_TIMEOUT_MS = 30_000;

let dir: string;
const started: ChildHandle[] = [];
const strays = new Set<number>();

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'leasejob-child-'));
});

afterEach(async () => {
  // Never leave a process behind, whatever the test did.
  for (const child of started.splice(0)) await child.stop({ graceMs: 0 });
  for (const pid of strays) killQuietly(pid);
  strays.clear();
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

async function start(command: string, args: string[], opts: Partial<Parameters<typeof startChild>[2]> = {}) {
  const child = await startChild(command, args, { env, ...opts });
  started.push(child);
  return child;
}

function tempFile(name: string): string {
  return path.join(dir, `${name}-${Math.random().toString(36).slice(2)}`);
}

/** The pid a fixture wrote to `file`, once it is there in full. */
function waitForPid(file: string): Promise<number> {
  return waitFor(
    `pid in ${file}`,
    () => {
      return readPidFile(file);
    },
    WAIT_LIMIT_MS,
    POLL_MS,
  );
}

/** Gone, or a zombie: orphans here are reparented to a PID 1 that may never reap them. */
const isGone = (pid: number): boolean => !isAlive(pid);

function waitUntilGone(pid: number): Promise<true> {
  return waitFor(`pid ${pid} to exit`, () => (isGone(pid) ? true : undefined), WAIT_LIMIT_MS, POLL_MS);
}

function killQuietly(pid: number): void {
  try {
    signalPid(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

describe('startChild', { timeout: TEST_TIMEOUT_MS }, () => {
  it.each([0, 3])('passes exit code %i through', async (code) => {
    const child = await start(node, [fixture('exit-with.mjs'), String(code)]);
    await expect(child.exited).resolves.toEqual({ exitCode: code, signal: null, code });
  });

  it.each(['SIGTERM', 'SIGKILL', 'SIGINT'] as const)('maps death by %s to 128+N', async (sig) => {
    const ready = tempFile('ready');
    const child = await start(node, [fixture('forever.mjs'), ready]);
    expect(await waitForPid(ready)).toBe(child.pid);
    child.signal(sig);
    await expect(child.exited).resolves.toEqual({
      exitCode: null,
      signal: sig,
      code: 128 + osConstants.signals[sig],
    });
  });

  it('gives the child exactly the env it was given', async () => {
    const saved = process.env.DATABASE_URL;
    process.env.DATABASE_URL = 'postgres://sentinel@nowhere/leak';
    try {
      const out = tempFile('env');
      const childEnv = { FENCE_TOKEN: '42', LEASEJOB_NAME: 'nightly' };
      const child = await start(node, [fixture('write-env.mjs'), out], { env: childEnv });
      expect((await child.exited).code).toBe(0);
      expect(JSON.parse(readFileSync(out, 'utf8'))).toEqual(childEnv);
    } finally {
      if (saved === undefined) delete process.env.DATABASE_URL;
      else process.env.DATABASE_URL = saved;
    }
  });

  it('runs the command in the given cwd', async () => {
    const out = tempFile('env');
    const child = await start(node, ['./write-env.mjs', out], { cwd: FIXTURES });
    expect((await child.exited).code).toBe(0);
    expect(JSON.parse(readFileSync(out, 'utf8'))).toEqual(env);
  });

  it('rejects a missing command with SpawnError 127', async () => {
    const missing = startChild('leasejob-no-such-command', [], { env });
    await expect(missing).rejects.toBeInstanceOf(SpawnError);
    await expect(missing).rejects.toMatchObject({ code: 'E_SPAWN', exitCode: 127 });
    await expect(startChild(path.join(dir, 'nope'), [], { env })).rejects.toMatchObject({ exitCode: 127 });
  });

  it('rejects a command that is not executable with SpawnError 126', async () => {
    const script = tempFile('not-executable');
    writeFileSync(script, '#!/bin/sh\nexit 0\n');
    chmodSync(script, 0o644);
    await expect(startChild(script, [], { env })).rejects.toMatchObject({ code: 'E_SPAWN', exitCode: 126 });
    await expect(startChild(dir, [], { env })).rejects.toMatchObject({ code: 'E_SPAWN', exitCode: 126 });
    const onPath = { PATH: path.dirname(script) };
    await expect(startChild(path.basename(script), [], { env: onPath })).rejects.toMatchObject({ exitCode: 126 });
  });
});

describe('stop', { timeout: TEST_TIMEOUT_MS }, () => {
  it('stops a well-behaved child with the first signal, without waiting out the grace', async () => {
    const ready = tempFile('ready');
    const child = await start(node, [fixture('forever.mjs'), ready]);
    await waitForPid(ready);
    const t0 = performance.now();
    const result = await child.stop({ graceMs: 60_000 });
    expect(result).toMatchObject({ signal: 'SIGTERM', code: 143 });
    expect(performance.now() - t0).toBeLessThan(WAIT_LIMIT_MS);
  });

  it('sends `first` instead of SIGTERM when given', async () => {
    const ready = tempFile('ready');
    const child = await start(node, [fixture('forever.mjs'), ready]);
    await waitForPid(ready);
    await expect(child.stop({ graceMs: 60_000, first: 'SIGINT' })).resolves.toMatchObject({
      signal: 'SIGINT',
      code: 130,
    });
  });

  it('SIGKILLs a child that ignores SIGTERM once the grace is over', async () => {
    const ready = tempFile('ready');
    const child = await start(node, [fixture('ignore-sigterm.mjs'), ready]);
    await waitForPid(ready);
    const graceMs = 1_000;
    const t0 = performance.now();
    const result = await child.stop({ graceMs });
    const elapsed = performance.now() - t0;
    expect(result).toEqual({ exitCode: null, signal: 'SIGKILL', code: 137 });
    expect(elapsed).toBeGreaterThanOrEqual(graceMs - 50);
    expect(elapsed).toBeLessThan(graceMs + 10_000);
  });

  it('shares one stop between concurrent calls, and a shorter grace shortens it', async () => {
    const ready = tempFile('ready');
    const child = await start(node, [fixture('ignore-sigterm.mjs'), ready]);
    await waitForPid(ready);
    const t0 = performance.now();
    const long = child.stop({ graceMs: 60_000 });
    const short = child.stop({ graceMs: 500 });
    const [a, b] = await Promise.all([long, short]);
    expect(a).toBe(b);
    expect(a.signal).toBe('SIGKILL');
    expect(performance.now() - t0).toBeLessThan(WAIT_LIMIT_MS);
    await expect(child.exited).resolves.toBe(a);
  });

  it('resolves once when the child exits on its own during the grace', async () => {
    const ready = tempFile('ready');
    const child = await start(node, [fixture('ignore-sigterm.mjs'), ready]);
    await waitForPid(ready);
    const stopping = child.stop({ graceMs: 60_000 });
    child.signal('SIGKILL'); // stands in for the child finishing by itself mid-stop
    const result = await stopping;
    expect(result).toEqual({ exitCode: null, signal: 'SIGKILL', code: 137 });
    await expect(child.exited).resolves.toBe(result);
    await expect(child.stop({ graceMs: 0 })).resolves.toBe(result);
  });

  it('returns the natural result when called after the child exited', async () => {
    const child = await start(node, [fixture('sleep-then.mjs'), '10', '5']);
    const result = await child.exited;
    expect(result.code).toBe(5);
    child.signal('SIGTERM'); // no-op, must not throw
    await expect(child.stop({ graceMs: 1_000 })).resolves.toBe(result);
  });

  it('kills the grandchild in the process group too', async () => {
    const pidFile = tempFile('grandchild');
    const child = await start(node, [fixture('spawn-grandchild.mjs'), pidFile]);
    const grandchild = await waitForPid(pidFile);
    strays.add(grandchild);
    expect(isGone(grandchild)).toBe(false);
    const t0 = performance.now();
    const result = await child.stop({ graceMs: 60_000 });
    expect(result.signal).toBe('SIGTERM');
    await waitUntilGone(grandchild);
    // Both die on SIGTERM: stop must notice the group is empty rather than wait out the grace.
    expect(performance.now() - t0).toBeLessThan(WAIT_LIMIT_MS);
  });

  it('SIGKILLs a grandchild that ignores SIGTERM after the leader has gone', async () => {
    const pidFile = tempFile('grandchild');
    const child = await start(node, [fixture('spawn-grandchild.mjs'), pidFile, 'ignore-sigterm']);
    const grandchild = await waitForPid(pidFile);
    strays.add(grandchild);
    const graceMs = 1_000;
    const t0 = performance.now();
    const result = await child.stop({ graceMs });
    const elapsed = performance.now() - t0;
    expect(result.signal).toBe('SIGTERM'); // the leader went quietly
    expect(elapsed).toBeGreaterThanOrEqual(graceMs - 50); // the grandchild got its grace
    expect(elapsed).toBeLessThan(graceMs + 10_000);
    await waitUntilGone(grandchild);
  });
});

describe('parent death', { timeout: TEST_TIMEOUT_MS }, () => {
  it('builds a plain spawn when parent-death signal is off', () => {
    expect(buildSpawnArgs('job', ['a', '--b'], false)).toEqual({ file: 'job', args: ['a', '--b'] });
  });

  const hasSetpriv = parentDeathSignalSupport() === 'setpriv';

  it.skipIf(!hasSetpriv)('wraps the command in setpriv --pdeathsig SIGKILL', () => {
    const { file, args } = buildSpawnArgs('job', ['a', '--', 'b'], true);
    expect(path.basename(file)).toBe('setpriv');
    expect(args).toEqual(['--pdeathsig', 'SIGKILL', '--', 'job', 'a', '--', 'b']);
  });

  it.skipIf(!hasSetpriv)('spawns the command itself under setpriv: the pid is the child', async () => {
    const ready = tempFile('ready');
    const child = await start(node, [fixture('forever.mjs'), ready], { parentDeathSignal: true });
    expect(await waitForPid(ready)).toBe(child.pid);
  });

  /** Start the stand-in runner with `spawnArgs`, wait for its child, SIGKILL the runner; returns the child's pid. */
  async function killRunner(spawnArgs: { file: string; args: string[] }, ready: string): Promise<number> {
    const runner = spawn(node, [fixture('runner-with-child.mjs'), JSON.stringify(spawnArgs)], { stdio: 'ignore' });
    const runnerGone = new Promise((resolve) => runner.once('exit', resolve));
    const pid = await waitForPid(ready);
    strays.add(pid);
    runner.kill('SIGKILL');
    await runnerGone;
    return pid;
  }

  it.skipIf(!hasSetpriv)('a runner killed by SIGKILL takes its child with it (setpriv)', async () => {
    const ready = tempFile('ready');
    const pid = await killRunner(buildSpawnArgs(node, [fixture('forever.mjs'), ready], true), ready);
    await waitUntilGone(pid);
  });

  it.skipIf(!hasSetpriv)('without parent-death signal the child outlives a SIGKILLed runner (control)', async () => {
    const ready = tempFile('ready');
    const pid = await killRunner(buildSpawnArgs(node, [fixture('forever.mjs'), ready], false), ready);
    await delay(500);
    expect(isGone(pid)).toBe(false);
  });

  it.runIf(!hasSetpriv)(
    'is unavailable here: setpriv (util-linux) not found or not Linux, parent-death tests skipped',
    () => {
      expect(buildSpawnArgs('job', [], true)).toEqual({ file: 'job', args: [] });
    },
  );
});
