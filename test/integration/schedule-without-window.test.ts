// `--schedule` alone is plain mutual exclusion: it keeps running (and exiting) as before, but says
// once per run that each trigger runs the command, naming --window-from-schedule; --mutex-only
// says that is meant and silences it.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fixture, logLines, runCli } from '../helpers/cli.js';
import { NO_DB_ENV } from '../helpers/both-stores.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-schedule-alone-');
const state = path.join(tmp, 'state.db');
const WARNING = /^no window \(--schedule without --window-from-schedule\): .*--mutex-only/;

const run = (name: string, flags: string[], command: string[]) =>
  runCli(
    ['run', '--state-file', state, '--name', name, '--schedule', '* * * * *', ...flags, '--', ...command],
    NO_DB_ENV,
  );
const warnings = (stderr: string): unknown[] => logLines(stderr).filter((l) => WARNING.test(String(l.msg)));
const runsIn = (file: string): number => readFileSync(file, 'utf8').split('\n').filter(Boolean).length;

describe('run --schedule without a window', () => {
  it('runs the command at every trigger, as before, and warns once per run naming --window-from-schedule', async () => {
    const out = path.join(tmp, 'alone.runs');
    for (let i = 0; i < 3; i++) {
      const r = await run('alone', [], [process.execPath, fixture('append-pid.mjs'), out]);
      expect(r.exitCode, r.all).toBe(0);
      expect(warnings(r.stderr)).toHaveLength(1);
      expect(logLines(r.stderr).find((l) => WARNING.test(String(l.msg)))).toMatchObject({
        level: 'warn',
        job: 'alone',
      });
    }
    expect(runsIn(out)).toBe(3); // three triggers in one minute: three runs, as documented
  });

  it('at --log-level warn (a crontab) the warning is all it prints; a failing child keeps its exit code', async () => {
    const ok = await run('alone-warn', ['--log-level', 'warn'], [process.execPath, fixture('exit-with.mjs'), '0']);
    expect(ok.exitCode, ok.all).toBe(0);
    expect(logLines(ok.stderr)).toHaveLength(1);
    expect(warnings(ok.stderr)).toHaveLength(1);
    const failed = await run('alone-warn', ['--log-level', 'warn'], [process.execPath, fixture('exit-with.mjs'), '3']);
    expect(failed.exitCode, failed.all).toBe(3);
    expect(warnings(failed.stderr)).toHaveLength(1);
  });

  it('--mutex-only says it is meant: no warning, and still every trigger runs', async () => {
    const out = path.join(tmp, 'mutex.runs');
    for (let i = 0; i < 2; i++) {
      const r = await run(
        'mutex',
        ['--mutex-only', '--log-level', 'warn'],
        [process.execPath, fixture('append-pid.mjs'), out],
      );
      expect(r.exitCode, r.all).toBe(0);
      expect(r.stderr).toBe('');
    }
    expect(runsIn(out)).toBe(2);
  });

  it('with --window-from-schedule: no warning, and the second trigger of the occurrence does not run', async () => {
    const out = path.join(tmp, 'window.runs');
    // Both triggers for one occurrence, as cron on two hosts fires them (the time given, not read).
    const tick = ['--window-from-schedule', '--scheduled-time', '2026-12-01T10:00:00Z'];
    for (let i = 0; i < 2; i++) {
      const r = await run('windowed', tick, [process.execPath, fixture('append-pid.mjs'), out]);
      expect(r.exitCode, r.all).toBe(0);
      expect(warnings(r.stderr)).toEqual([]);
    }
    expect(runsIn(out)).toBe(1);
  });

  it('--mutex-only with a window is a contradiction: exit 64, nothing run', async () => {
    const out = path.join(tmp, 'contradiction.runs');
    for (const flags of [
      ['--mutex-only', '--window-from-schedule'],
      ['--mutex-only', '--window', 'w1'],
    ]) {
      const r = await run('contradiction', flags, [process.execPath, fixture('append-pid.mjs'), out]);
      expect(r.exitCode, r.all).toBe(64);
      expect(r.stderr).toContain('`--mutex-only` runs without a window');
    }
    expect(() => readFileSync(out)).toThrow();
  });
});
