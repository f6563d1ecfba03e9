// `leasejob status` fits the terminal: at COLUMNS=80 and 200 every line fits, the open-windows
// list is shortened with a count of what was left out, cells say in words what `-` left to guess
// (never held, free, none, no schedule, on time); `--wide` gives every column in full.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { NO_DB_ENV } from '../helpers/both-stores.js';
import { BIN, runCli } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp.js';

const state = ['--state-file', path.join(tempDir('leasejob-status-width-'), 'leasejob.db')];
const status = (env: Record<string, string | undefined>, ...flags: string[]) =>
  runCli(['status', ...state, ...flags], { ...NO_DB_ENV, ...env });

/** The table's lines (after the store line). */
const table = (stdout: string): string[] => stdout.trimEnd().split('\n').slice(1);
/** The ten latest due minutes, oldest first, as --scheduled-time takes them. */
const minutes = (n: number): string[] => {
  const now = Math.floor(Date.now() / 60_000) * 60_000;
  return Array.from({ length: n }, (_, i) => new Date(now - (n + 1 - i) * 60_000).toISOString());
};

describe('status at the width of the terminal', () => {
  beforeAll(async () => {
    // A job with many failed windows, a completed one with a long name (daily: what is due of it
    // stays the same while the tests run), one without a schedule.
    // One after the other: they share the job's lease.
    for (const t of minutes(8)) {
      const r = await runCli(
        ['run', ...state, '--name', 'export-invoices', '--schedule', '* * * * *', '--window-from-schedule',
          '--scheduled-time', t, '--', 'false'], NO_DB_ENV); // prettier-ignore
      expect(r.exitCode, r.all).toBe(1);
    }
    const ok = await runCli(
      ['run', ...state, '--name', 'nightly-close-of-the-accounts-payable-ledger', '--schedule', '@daily',
        '--window-from-schedule', '--', 'true'], NO_DB_ENV); // prettier-ignore
    expect(ok.exitCode, ok.all).toBe(0);
    const plain = await runCli(['run', ...state, '--name', 'adhoc', '--window', 'w1', '--', 'true'], NO_DB_ENV);
    expect(plain.exitCode, plain.all).toBe(0);
  }, 120_000);

  it('at 80 columns every line fits, the list shortened with a count of what was left out', async () => {
    const r = await status({ COLUMNS: '80' });
    expect(r.exitCode, r.all).toBe(0);
    const lines = table(r.stdout);
    for (const l of lines) expect(l.length, r.stdout).toBeLessThanOrEqual(80);
    expect(lines[0]).toMatch(/^JOB +LEASE +LAST COMPLETED +OPEN +DUE$/);
    const failing = lines.find((l) => l.startsWith('export-invoices'))!;
    expect(failing, r.stdout).toMatch(/ (\+\d+ more|\d+ open) /);
    expect(failing).toMatch(/ free /);
    expect(failing).toMatch(/ (OVERDUE|not due yet|on time)/);
    const adhoc = lines.find((l) => l.startsWith('adhoc'))!;
    expect(adhoc, r.stdout).toMatch(/ free +w1 +none +no schedule$/);
    // The long name keeps its start; nothing reads `-`.
    expect(lines.some((l) => l.startsWith('nightly-close'))).toBe(true);
    expect(r.stdout).not.toMatch(/ - /);
  });

  it('at 200 columns more of the list is shown, each window with its outcome', async () => {
    const r = await status({ COLUMNS: '200' });
    expect(r.exitCode, r.all).toBe(0);
    const lines = table(r.stdout);
    for (const l of lines) expect(l.length, r.stdout).toBeLessThanOrEqual(200);
    const failing = lines.find((l) => l.startsWith('export-invoices'))!;
    expect(failing, r.stdout).toMatch(/\(failed, attempt 1\)/);
    expect(failing.length).toBeGreaterThan(80);
    const ok = lines.find((l) => l.startsWith('nightly-close-of-the-accounts-payable-ledger'))!;
    expect(ok, r.stdout).toMatch(/ free +\S+Z +none +(on time|not due yet)$/);
  });

  it('--wide shows every column in full, whatever COLUMNS says', async () => {
    const r = await status({ COLUMNS: '80' }, '--wide');
    expect(r.exitCode, r.all).toBe(0);
    const lines = table(r.stdout);
    expect(lines[0]).toMatch(
      /^JOB +HOLDER +GEN +EXPIRES IN +LAST COMPLETED WINDOW +COMPLETED AT +OPEN WINDOWS +DUE +NOT COMPLETED$/,
    );
    expect(lines.some((l) => l.length > 80)).toBe(true);
    expect(lines.find((l) => l.startsWith('adhoc'))).toMatch(
      / free +\d+ +not held +w1 +\S+Z +none +no schedule +no schedule$/,
    );
  });

  // util-linux's script(1) gives the command a terminal; stty sets its width. Without COLUMNS,
  // status reads the width from the terminal.
  const hasScript = spawnSync('script', ['--version']).status === 0;
  it.skipIf(!hasScript)('on a terminal of 60 columns, without COLUMNS, every line fits it', () => {
    const env = { ...process.env, ...NO_DB_ENV, COLUMNS: undefined, LINES: undefined } as NodeJS.ProcessEnv;
    const command = `stty cols 60; '${process.execPath}' '${BIN}' status ${state.map((a) => `'${a}'`).join(' ')}`;
    const r = spawnSync('script', ['-qec', command, '/dev/null'], { encoding: 'utf8', env, timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    const lines = table(r.stdout.replace(/\r/g, ''));
    expect(lines[0]).toMatch(/^JOB +LEASE +LAST COMPLETED +OPEN +DUE$/);
    for (const l of lines) expect([...l].length, r.stdout).toBeLessThanOrEqual(60);
    // Names cut to what is left, with …, never below 8 characters.
    expect(
      lines.some((l) => /^export-\S*\s/.test(l)),
      r.stdout,
    ).toBe(true);
  });
});
