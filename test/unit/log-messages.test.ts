// Every fixed message `run` logs is listed in docs/logs.md, so operators can alert on them.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/wait.js';

const RUN_PATH = [
  'src/lease/runner.ts',
  'src/lease/acquire.ts',
  'src/lease/finish.ts',
  'src/lease/windows.ts',
  'src/lease/attempts.ts',
  'src/lease/keeper.ts',
  'src/cli/commands/run.ts',
  'src/cli/commands/backfill.ts',
  'src/cli/run-session.ts',
  'src/cli/supervise.ts',
  'src/cli/reports.ts',
  'src/clock.ts',
];

describe('docs/logs.md', () => {
  it('names every fixed message the run path logs', () => {
    const logs = readFileSync(path.join(ROOT, 'docs', 'logs.md'), 'utf8');
    const messages = new Set<string>();
    for (const file of RUN_PATH) {
      const text = readFileSync(path.join(ROOT, file), 'utf8');
      // The message is the call's last argument, or either branch of a ternary there.
      for (const call of text.matchAll(/log\.(?:trace|debug|info|warn|error)\(([\s\S]*?)\);/g)) {
        for (const m of call[1]!.matchAll(/'([a-z][^']*)'\s*(?=,?\s*$|:\s*')/g)) messages.add(m[1]!);
      }
    }
    expect(messages.size).toBeGreaterThan(20);
    // Both branches of `ok ? 'window completed' : 'window left open'` are seen.
    expect([...messages]).toEqual(
      expect.arrayContaining([
        'window completed',
        'window left open',
        'signal received while waiting for the database',
      ]),
    );
    const missing = [...messages].filter((m) => !logs.includes(`\`${m}\``));
    expect(missing).toEqual([]);
  });
});
