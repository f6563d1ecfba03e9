// Issue 20 item 5: one rule for a run that ends by a signal. The ledger's exit code, the
// window-failed event's and leasejob's own exit code are the same number: 128+N when leasejob
// was told to stop by signal N (whatever the child then did), 124 past --max-runtime.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-signal-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

const conn = (): string[] => ['--database-url', db.url, '--schema', db.schema];

async function recorded(job: string): Promise<{ ledger: number | null; event: unknown }> {
  const [w] = await db.rows<{ exit_code: number | null }>(`SELECT exit_code FROM ${db.schema}.windows WHERE job = $1`, [
    job,
  ]);
  const [e] = await db.rows<{ detail: { exit_code?: number } }>(
    `SELECT detail FROM ${db.schema}.events WHERE job = $1 AND kind = 'window-failed'`,
    [job],
  );
  return { ledger: w?.exit_code ?? null, event: e?.detail.exit_code };
}

describe('a run ended by a signal: one exit code in the ledger, the event and the exit', () => {
  it('SIGTERM to leasejob, a child that ignores it and is SIGKILLed after the grace: 143 everywhere', async () => {
    const pidFile = path.join(tmp, 'ignore.pid');
    const p = startCli([
      'run',
      ...conn(),
      '--name',
      'sig-kill',
      '--window',
      'w',
      '--ttl',
      '10s',
      '--kill-grace',
      '300ms',
      '--',
      process.execPath,
      fixture('ignore-sigterm.mjs'),
      pidFile,
    ]);
    await waitFor('child ready', () => existsSync(pidFile));
    p.kill('SIGTERM');
    const r = await p;
    expect(r.exitCode, r.all).toBe(143);
    // The child's own end is in the log: killed by SIGKILL after the grace (at info: the
    // window's outcome line is the warning).
    expect(logLines(r.stderr).find((l) => l.msg === 'child exited')).toMatchObject({
      signal: 'SIGKILL',
      level: 'info',
    });
    expect(await recorded('sig-kill')).toEqual({ ledger: 143, event: 143 });
  });

  it('SIGINT to leasejob, a child that traps it and exits 0: 130 everywhere, the window open', async () => {
    const ready = path.join(tmp, 'trap-int.ready');
    const p = startCli([
      'run',
      ...conn(),
      '--name',
      'sig-trap',
      '--window',
      'w',
      '--ttl',
      '10s',
      '--',
      'sh',
      '-c',
      `trap 'exit 0' INT; touch ${ready}; while :; do sleep 0.05; done`,
    ]);
    await waitFor('child ready', () => existsSync(ready));
    p.kill('SIGINT');
    const r = await p;
    expect(r.exitCode, r.all).toBe(130);
    expect(await recorded('sig-trap')).toEqual({ ledger: 130, event: 130 });
  });

  it('--max-runtime: the child stopped by SIGTERM, 124 everywhere (as GNU timeout exits)', async () => {
    const r = await runCli([
      'run',
      ...conn(),
      '--name',
      'sig-maxrt',
      '--window',
      'w',
      '--ttl',
      '6s',
      '--kill-grace',
      '1s',
      '--max-runtime',
      '500ms',
      '--',
      process.execPath,
      fixture('forever.mjs'),
      path.join(tmp, 'maxrt.pid'),
    ]);
    expect(r.exitCode, r.all).toBe(124);
    expect(await recorded('sig-maxrt')).toEqual({ ledger: 124, event: 124 });
  });

  it('a child killed by a signal on its own (not by leasejob): 128+N everywhere', async () => {
    const r = await runCli([
      'run',
      ...conn(),
      '--name',
      'sig-self',
      '--window',
      'w',
      '--',
      'sh',
      '-c',
      'kill -KILL $$',
    ]);
    expect(r.exitCode, r.all).toBe(137);
    expect(await recorded('sig-self')).toEqual({ ledger: 137, event: 137 });
  });
});
