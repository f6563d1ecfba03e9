// stdout that cannot be written: a reader that went away is not an error (the command's own
// exit code stands, no stack trace); output lost otherwise (a full disk) is exit 74, said once.
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
});
