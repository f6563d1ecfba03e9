// Side-effect-free test helpers, safe to import anywhere (unlike cli.ts, which makes a state
// directory when imported): where the checkout and its fixtures are, polling for a condition,
// whether a process is still alive, and pino's JSON log lines.
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export { isAlive } from './proc.mjs';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const FIXTURES = path.join(ROOT, 'test', 'fixtures');
export const fixture = (name: string): string => path.join(FIXTURES, name);

/** Poll `probe` (sync or async) until it returns something other than undefined or false. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 30_000,
  intervalMs = 50,
): Promise<T> {
  const start = Date.now();
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
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
