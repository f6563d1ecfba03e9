// Spawn the built CLI as an operator would. Importing this makes a state directory for the
// importing test file (removed after its tests); the side-effect-free helpers live in wait.ts
// and are re-exported here.
import path from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { tempDir } from './temp.js';
import { ROOT } from './wait.js';

export { ROOT, fixture, isAlive, logLines, waitFor } from './wait.js';
export const BIN = path.join(ROOT, 'bin', 'leasejob.js');

export interface CliEnv {
  [k: string]: string | undefined;
}

/** Start `leasejob <args>` in the background; the promise resolves with exitCode/stdout/stderr. */
// Commands run without a database URL use the embedded store: keep it out of the real home.
// Its removal is registered at import, so it runs after the importing file's own afterAll hooks
// (vitest runs them last-registered first) and its processes have ended.
const STATE_HOME = tempDir('leasejob-state-');

export function startCli(
  args: string[],
  env: CliEnv = {},
  opts: { timeoutMs?: number; cwd?: string } = {},
): ResultPromise<{ reject: false; all: true }> {
  return execa(process.execPath, [BIN, ...args], {
    ...(opts.cwd ? { cwd: opts.cwd } : {}),
    env: { XDG_STATE_HOME: STATE_HOME, ...env },
    extendEnv: true,
    reject: false,
    all: true,
    timeout: opts.timeoutMs ?? 60_000,
    cleanup: true,
  }) as ResultPromise<{ reject: false; all: true }>;
}

export async function runCli(args: string[], env: CliEnv = {}, opts: { timeoutMs?: number; cwd?: string } = {}) {
  return await startCli(args, env, opts);
}
