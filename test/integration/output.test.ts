// stdout that cannot be written: a reader that went away is not an error (the command's own
// exit code stands, no stack trace); output lost otherwise (a full disk) is exit 74, said once.
// Logs (stderr) that cannot be written are lost, never the run.
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';

let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => db.close());

const quote = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

/** Runs `leasejob <args> <redirect>` in bash; the exit code is leasejob's own (PIPESTATUS[0]). */
async function shell(args: string[], redirect: string) {
  const cmd = `${quote(process.execPath)} ${quote(BIN)} ${args.map(quote).join(' ')} ${redirect}; echo "exit=\${PIPESTATUS[0]}" >&2`;
  const r = await execa('bash', ['-c', cmd], { reject: false, env: { LEASEJOB_DATABASE_URL: db.url } });
  const code = Number(/exit=(\d+)\s*$/.exec(r.stderr)?.[1]);
  return { code, stderr: r.stderr.replace(/exit=\d+\s*$/, '').trim() };
}

describe('output that cannot be written', () => {
  // The reader closes the pipe at once and stays: the write is refused with EPIPE every time,
  // not only when the reader happened to exit first.
  const goneReader = '| { exec 0<&-; sleep 1; }';

  it('--help into a pipe whose reader has gone: no stack trace, exit 0', async () => {
    const r = await shell(['--help'], goneReader);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe('');
  });

  it('status --json with the reader gone, on a migrated schema: exit 0', async () => {
    const r = await shell(['status', '--json', '--schema', db.schema], goneReader);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe('');
  });

  it.each([
    ['--version', ['--version']],
    ['--help', ['--help']],
    ['status --json', ['status', '--json']],
    ['status', ['status']],
  ])('%s to a full device: exit 74, one line', async (_what, args) => {
    const r = await shell([...args, ...(args[0] === 'status' ? ['--schema', db.schema] : [])], '> /dev/full');
    expect(r.code, r.stderr).toBe(74);
    expect(r.stderr).toBe('leasejob: could not write the output: ENOSPC');
  });

  it('run with its log on a full device (2>/dev/full): the child runs, its window completes, its exit code stands', async () => {
    const job = `full-${process.pid}`;
    const run = (cmd: string) =>
      shell(['run', '--name', job, '--window', 'w1', '--schema', db.schema, '--', 'sh', '-c', cmd], '2>/dev/full');
    const ok = await run('exit 0');
    expect(ok.code).toBe(0);
    expect(await db.rows(`SELECT window_key, outcome FROM ${db.schema}.windows WHERE job = $1`, [job])).toEqual([
      { window_key: 'w1', outcome: 'completed' },
    ]);
    // The next trigger finds it done, and says nothing it could not write.
    expect((await run('exit 3')).code).toBe(0);
    // A child's failure is still its own exit code.
    const failed = await shell(
      ['run', '--name', job, '--window', 'w2', '--schema', db.schema, '--', 'sh', '-c', 'exit 3'],
      '2>/dev/full',
    );
    expect(failed.code).toBe(3);
  });
});
