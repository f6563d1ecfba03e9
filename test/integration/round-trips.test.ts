// What a run sends, counted by the server itself (log_statement = all, one server of its own):
// a run is one statement to acquire the lease and claim its window, and one to record the outcome
// and release; a skipped run (the window done, the lease busy with --on-busy skip) is one, its
// skip event in the acquiring statement. docs/performance.md has what each costs.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { runCli, startCli, waitFor } from '../helpers/cli.js';
import { replicationMissing, startLocalServer } from '../helpers/replication.mjs';

const missing = replicationMissing();
if (missing) console.info(`round-trip tests skipped: ${missing}`);

let server: Awaited<ReturnType<typeof startLocalServer>> | undefined;
beforeAll(async () => {
  if (missing) return;
  server = await startLocalServer({ conf: ["log_statement = 'all'", 'log_connections = on'] });
  const m = await runCli(['migrate', '--database-url', server.url]);
  expect(m.exitCode, m.all).toBe(0);
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

const serverLog = (): string => readFileSync(path.join(server!.dir, 'server.log'), 'utf8');

/** The statements and connections the server logged while `act` ran: function names, in order. */
async function sent(act: () => Promise<unknown>): Promise<{ statements: string[]; connections: number }> {
  const from = serverLog().length;
  await act();
  const lines = serverLog().slice(from).split('\n');
  const statements = lines
    .filter((l) => /LOG: {2}(execute [^:]*|statement): /.test(l) && !/\.renew/.test(l))
    .map((l) => /"leasejob"\.([a-z_]+)\(/.exec(l)?.[1] ?? l);
  return { statements, connections: lines.filter((l) => l.includes('connection authorized')).length };
}

async function held(job: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: server!.url });
  await c.connect();
  try {
    const r = await c.query(
      'SELECT 1 FROM leasejob.leases WHERE name = $1 AND released_at IS NULL AND expires_at > now()',
      [job],
    );
    return r.rows.length === 1;
  } finally {
    await c.end();
  }
}

const run = (args: string[]) => runCli(['run', '--database-url', server!.url, ...args]);

describe.skipIf(missing !== undefined)('round trips per run (PostgreSQL)', () => {
  it('run -- true: one connection, two statements (acquire and claim; finish and release)', async () => {
    const r = await sent(() => run(['--name', 'rt', '--window', 'w', '--', 'true']));
    expect(r).toEqual({ statements: ['acquire_two_clock', 'finish'], connections: 1 });
  });

  it('a window already done: one statement, the done-skip recorded in it', async () => {
    await run(['--name', 'rt-done', '--window', 'w', '--', 'true']);
    const r = await sent(() => run(['--name', 'rt-done', '--window', 'w', '--', 'true']));
    expect(r).toEqual({ statements: ['acquire_two_clock'], connections: 1 });
    const h = await runCli(['history', '--database-url', server!.url, '--name', 'rt-done', '--json']);
    expect((JSON.parse(h.stdout) as Array<{ kind: string }>).map((e) => e.kind)).toContain('done-skip');
  });

  it('a busy lease with --on-busy skip: one statement, the busy-skip recorded in it', async () => {
    const holder = startCli([
      'run',
      '--database-url',
      server!.url,
      '--name',
      'rt-busy',
      '--ttl',
      '60s',
      '--',
      'sleep',
      '60',
    ]);
    try {
      await waitFor('the holder to hold the lease', () => held('rt-busy'), 60_000);
      const r = await sent(() => run(['--name', 'rt-busy', '--', 'true']));
      expect(r).toEqual({ statements: ['acquire_two_clock'], connections: 1 });
      const h = await runCli(['history', '--database-url', server!.url, '--name', 'rt-busy', '--json']);
      const skip = (JSON.parse(h.stdout) as Array<{ kind: string; detail: Record<string, unknown> }>).find(
        (e) => e.kind === 'busy-skip',
      );
      expect(skip?.detail).toMatchObject({ holder_generation: '1' });
    } finally {
      holder.kill('SIGTERM');
      await holder;
    }
  });
});
