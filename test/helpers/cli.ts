// Spawn the built CLI as an operator would. Importing this makes a state directory for the
// importing test file (removed after its tests); the side-effect-free helpers live in wait.ts
// and are re-exported here.
import path from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { tempDir } from './temp.js';
import { ROOT, logLines, waitFor } from './wait.js';

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

/**
 * `leasejob exporter <args> --port 0 --host 127.0.0.1`, waited for until it logs the port it
 * listens on: the process, that port, and `stop` (SIGTERM, then its end).
 */
export async function startExporter(
  args: string[],
  env: CliEnv = {},
  opts: { timeoutMs?: number } = {},
): Promise<{ p: ReturnType<typeof startCli>; port: number; stop: () => Promise<unknown> }> {
  const p = startCli(['exporter', ...args, '--port', '0', '--host', '127.0.0.1'], env, opts);
  let err = '';
  p.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  try {
    const port = await waitFor('exporter to listen', () => {
      const line = logLines(err).find((l) => l.msg === 'exporter listening');
      return line ? Number(line.port) : undefined;
    });
    return {
      p,
      port,
      stop: async () => {
        p.kill('SIGTERM');
        return p;
      },
    };
  } catch (e) {
    p.kill('SIGTERM');
    await p;
    throw e;
  }
}

/** One `GET /metrics` of an exporter started for it (startExporter), then stopped. */
export async function scrapeOnce(args: string[], env: CliEnv = {}, opts: { timeoutMs?: number } = {}): Promise<string> {
  const exporter = await startExporter(args, env, opts);
  try {
    return await (await fetch(`http://127.0.0.1:${exporter.port}/metrics`)).text();
  } finally {
    await exporter.stop();
  }
}
