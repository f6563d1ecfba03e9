// Logs for a person on a terminal: lines when stderr is a TTY (util-linux `script` gives the CLI
// one), JSON otherwise or when asked; --log-format and LEASEJOB_LOG_FORMAT decide over both.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { BIN, logLines, runCli } from '../helpers/cli.js';
import { NO_DB_ENV } from '../helpers/both-stores.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-log-format-');
const state = path.join(tmp, 'state.db');
const hasScript = spawnSync('script', ['--version']).status === 0;
const quote = (a: string): string => `'${a.replace(/'/g, "'\\''")}'`;
/** A human line: "HH:MM:SS LEVEL message  key=value ...". */
const LINE = /^\d\d:\d\d:\d\d (INFO |WARN |ERROR|DEBUG) \S/;

/** `leasejob <args>` with a terminal on stdin, stdout and stderr; what the terminal showed. */
function onTerminal(args: string[], env: Record<string, string> = {}): { status: number | null; lines: string[] } {
  const r = spawnSync('script', ['-qec', [process.execPath, BIN, ...args].map(quote).join(' '), '/dev/null'], {
    encoding: 'utf8',
    env: { ...process.env, DATABASE_URL: '', LEASEJOB_DATABASE_URL: '', PGHOST: '', LEASEJOB_LOG_FORMAT: '', ...env },
    timeout: 60_000,
  });
  return { status: r.status, lines: r.stdout.split(/\r?\n/).filter(Boolean) };
}

const run = (name: string, window: string, extra: string[] = []): string[] => [
  'run',
  '--state-file',
  state,
  '--name',
  name,
  '--window',
  window,
  ...extra,
  '--',
  'echo',
  'hi',
];

describe.skipIf(!hasScript)('logs on a terminal', () => {
  it('are short lines: time, level, message and the fields that matter; the child prints as ever', () => {
    const m = onTerminal(['migrate', '--state-file', state]);
    expect(m.status, m.lines.join('\n')).toBe(0);
    expect(m.lines).toEqual([expect.stringMatching(/^\d\d:\d\d:\d\d INFO {2}schema (up to date|migrated)/)]);

    const r = onTerminal(run('tty-lines', 'w1'));
    expect(r.status, r.lines.join('\n')).toBe(0);
    expect(r.lines).toContain('hi');
    const logs = r.lines.filter((l) => l !== 'hi');
    expect(logs.length).toBeGreaterThan(3);
    for (const l of logs) expect(l, r.lines.join('\n')).toMatch(LINE);
    expect(logs).toContainEqual(
      expect.stringMatching(
        /^\d\d:\d\d:\d\d INFO {2}lease acquired {2}job=tty-lines window=w1 generation=\d+ attempt=1$/,
      ),
    );
    expect(logs).toContainEqual(expect.stringMatching(/ INFO {2}window completed {2}.*outcome=completed/));
    // What only a machine reads stays out of a person's line.
    expect(r.lines.join('\n')).not.toMatch(/"level"|pid=|owner=|ttlMs=/);

    // A skip on the terminal: one line saying so.
    const again = onTerminal(run('tty-lines', 'w1'));
    expect(again.status).toBe(0);
    expect(again.lines).toContainEqual(
      expect.stringMatching(/ INFO {2}window already completed {2}job=tty-lines window=w1/),
    );
  });

  it('are JSON with --log-format json or LEASEJOB_LOG_FORMAT=json', () => {
    for (const [args, env] of [
      [run('tty-json', 'w1', ['--log-format', 'json']), {}],
      [run('tty-json', 'w2'), { LEASEJOB_LOG_FORMAT: 'json' }],
    ] as const) {
      const r = onTerminal([...args], env);
      expect(r.status, r.lines.join('\n')).toBe(0);
      const logs = r.lines.filter((l) => l !== 'hi');
      expect(logs.length).toBeGreaterThan(3);
      for (const l of logs) expect(() => JSON.parse(l) as unknown, l).not.toThrow();
    }
  });
});

describe('logs without a terminal', () => {
  it('are JSON by default, lines with --log-format pretty or LEASEJOB_LOG_FORMAT=pretty', async () => {
    const json = await runCli(run('pipe-log', 'w1'), NO_DB_ENV);
    expect(json.exitCode, json.all).toBe(0);
    expect(logLines(json.stderr).map((l) => l.msg)).toContain('lease acquired');

    for (const [args, env] of [
      [run('pipe-log', 'w2', ['--log-format', 'pretty']), NO_DB_ENV],
      [run('pipe-log', 'w3'), { ...NO_DB_ENV, LEASEJOB_LOG_FORMAT: 'pretty' }],
    ] as const) {
      const r = await runCli([...args], env);
      expect(r.exitCode, r.all).toBe(0);
      expect(r.stdout).toBe('hi');
      const lines = r.stderr.split('\n').filter(Boolean);
      expect(lines.length).toBeGreaterThan(3);
      for (const l of lines) expect(l).toMatch(LINE);
    }
  });

  it('a format that does not exist: exit 64 naming the choices, nothing run', async () => {
    const flag = await runCli(run('bad-format', 'w1', ['--log-format', 'xml']), NO_DB_ENV);
    expect(flag.exitCode, flag.all).toBe(64);
    expect(flag.stderr).toContain('auto, json, pretty');
    const env = await runCli(run('bad-format', 'w1'), { ...NO_DB_ENV, LEASEJOB_LOG_FORMAT: 'xml' });
    expect(env.exitCode, env.all).toBe(64);
    expect(env.stderr).toContain('LEASEJOB_LOG_FORMAT');
    expect(flag.stdout + env.stdout).not.toContain('hi');
  });
});
