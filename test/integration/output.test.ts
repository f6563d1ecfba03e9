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
  it.each([
    ['--help', ['--help'], 0],
    ['status --json', ['status', '--json', '--schema', 'unused'], 69],
  ])('%s into a pipe whose reader has gone: no stack trace, the exit code stands', async (_what, args, expected) => {
    const r = await shell(args, '| true');
    expect(r.code, r.stderr).toBe(expected);
    expect(r.stderr).not.toMatch(/EPIPE|\n\s+at /);
  });

  it('status --json with the reader gone, on a migrated schema: exit 0', async () => {
    const r = await shell(['status', '--json', '--schema', db.schema], '| true');
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
