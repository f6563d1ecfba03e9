// Spawn the built CLI as an operator would, and poll for conditions with generous limits.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa, type ResultPromise } from 'execa';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const BIN = path.join(ROOT, 'bin', 'leasejob.js');
export const FIXTURES = path.join(ROOT, 'test', 'fixtures');
export const fixture = (name: string): string => path.join(FIXTURES, name);

export interface CliEnv {
  [k: string]: string | undefined;
}

/** Start `leasejob <args>` in the background; the promise resolves with exitCode/stdout/stderr. */
// Commands run without a database URL use the embedded store: keep it out of the real home.
const STATE_HOME = mkdtempSync(path.join(tmpdir(), 'leasejob-state-'));

export function startCli(args: string[], env: CliEnv = {}, opts: { timeoutMs?: number } = {}): ResultPromise<{ reject: false; all: true }> {
  return execa(process.execPath, [BIN, ...args], {
    env: { XDG_STATE_HOME: STATE_HOME, ...env },
    extendEnv: true,
    reject: false,
    all: true,
    timeout: opts.timeoutMs ?? 60_000,
    cleanup: true,
  }) as ResultPromise<{ reject: false; all: true }>;
}

export async function runCli(args: string[], env: CliEnv = {}, opts: { timeoutMs?: number } = {}) {
  return await startCli(args, env, opts);
}

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 30_000, intervalMs = 50): Promise<T> {
  const start = Date.now();
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Alive and not a zombie (PID 1 here may reap orphans late). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** Parse pino JSON lines out of a stderr blob. */
export function logLines(stderr: string): Array<Record<string, unknown>> {
  return stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => {
      try {
        return JSON.parse(l) as Record<string, unknown>;
      } catch {
        return {};
      }
    });
}
