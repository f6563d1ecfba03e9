// What docs/ and the README say about exit codes and table columns, checked against the CLI
// itself: the exit-code table in src/errors.ts, each command's --help, the real exit of a
// command, and the headers `status` and `history` really print.
import { spawnSync } from 'node:child_process';
import Database from 'better-sqlite3';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/errors.js';
import { BIN, ROOT } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp.js';

const state = path.join(tempDir('leasejob-docs-cli-'), 'state.db');
const ENV = { ...process.env, DATABASE_URL: '', LEASEJOB_DATABASE_URL: '', PGHOST: '', LEASEJOB_LOG_FORMAT: 'json' };

function cli(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env: ENV, timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}
const withStore = (...args: string[]): ReturnType<typeof cli> => {
  const dash = args.indexOf('--');
  const flags = ['--state-file', state, '--log-level', 'error'];
  return dash < 0 ? cli(...args, ...flags) : cli(...args.slice(0, dash), ...flags, ...args.slice(dash));
};

/** Every markdown page a user reads: README.md, docs/ and docs/deploy/. */
const PAGES = [
  'README.md',
  ...readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
  ...readdirSync(path.join(ROOT, 'docs', 'deploy'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/deploy/${f}`),
];
const text = (page: string): string => readFileSync(path.join(ROOT, page), 'utf8');

/** The first column of the table under `heading` on `page`: its numeric codes, and its other cells. */
function codeTable(page: string, heading: string): { codes: number[]; other: string[] } {
  const after = text(page).split(heading)[1];
  if (after === undefined) throw new Error(`${page} has no "${heading}"`);
  const lines = after.split('\n').slice(1);
  const start = lines.findIndex((l) => l.startsWith('|'));
  const end = lines.findIndex((l, k) => k > start && !l.startsWith('|'));
  const rows = lines
    .slice(start, end < 0 ? undefined : end)
    .map((l) => l.split('|')[1]!.trim())
    .filter((c) => !['code', 'exit'].includes(c) && !/^-+$/.test(c)); // the header and |---|
  const codes = rows.flatMap((c) => (/^\d+(, \d+)*$/.test(c) ? c.split(', ').map(Number) : []));
  return { codes, other: rows.filter((c) => !/^\d+(, \d+)*$/.test(c)) };
}

/** The numbers in a --help text's "Exit codes: ..." paragraph (to the next blank line or sentence block). */
function helpCodes(command: string): number[] {
  const help = cli(command, '--help').stdout;
  const para = help.slice(help.search(/exit codes/i)).split(/\n\s*\n/)[0]!;
  return [...new Set([...para.matchAll(/(?<![\w+])(\d{1,3})(?![\w+])/g)].map((m) => Number(m[1])))];
}

// What `run` can exit with itself (the child's own codes and 128+N aside): src's table, but the
// operator commands' conflict, and a shell's 126 and 127 for a command it cannot start.
// (74, output lost, is every command's and said apart, in run.md's text.)
const RUN_CODES = [
  ...Object.values(ExitCode).filter((c) => c !== ExitCode.conflict && c !== ExitCode.outputLost),
  126,
  127,
].sort((a, b) => a - b);

describe('exit codes in the docs', () => {
  it("run's table (README and docs/run.md) is src's exit-code table, and run --help names each code", () => {
    for (const page of ['README.md', 'docs/run.md']) {
      const t = codeTable(page, '## Exit codes of `run`');
      expect(
        [...t.codes].sort((a, b) => a - b),
        page,
      ).toEqual(RUN_CODES);
      expect(t.other, page).toEqual(["child's code", '128+N']);
    }
    const help = helpCodes('run');
    for (const code of RUN_CODES.filter((c) => c !== 0)) expect(help, `run --help names ${code}`).toContain(code);
  });

  it("the operator commands' table is what their --help says", () => {
    const t = codeTable('docs/operating.md', '## Exit codes of the operator commands');
    for (const command of ['pause', 'resume', 'mark', 'release']) {
      const help = helpCodes(command);
      for (const code of t.codes) expect(help, `${command} --help names ${code}`).toContain(code);
    }
    expect(t.codes).toContain(ExitCode.conflict);
  });

  it("check's table is the monitoring-plugin codes check --help gives, with the same words", () => {
    const t = codeTable('docs/monitoring.md', '| exit | meaning |');
    const help = cli('check', '--help').stdout.replace(/\s+/g, ' ');
    expect(t.codes).toEqual([0, 1, 2, 3]);
    for (const [code, word] of [
      [0, 'OK'],
      [1, 'WARNING'],
      [2, 'CRITICAL'],
      [3, 'UNKNOWN'],
    ] as const) {
      expect(help).toContain(`${code} ${word}`);
      expect(text('docs/monitoring.md')).toMatch(new RegExp(`^\\| ${code} \\| ${word}`, 'm'));
    }
  });

  it('every "exit NN" of leasejob itself named anywhere in the docs is one it has', () => {
    // 64 and above are leasejob's own (and 126, 127, 128+N a shell's); a child's codes in examples are below.
    const known = new Set<number>([...Object.values(ExitCode), 126, 127]);
    const wrong: string[] = [];
    for (const page of PAGES) {
      for (const m of text(page).matchAll(/\bexit(?:s|ing| code| codes| with)? (\d{2,3})\b(?!\+)/g)) {
        const code = Number(m[1]);
        if (code >= 64 && !known.has(code) && !(code > 128 && code <= 128 + 64)) wrong.push(`${page}: ${m[0]}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('what run.md says a command exits for a job that never ran is what it exits', () => {
    const runMd = text('docs/run.md').replace(/\s+/g, ' ');
    const listed = /`release`, `history` and `status --name` for a job that has never run exit (\d+)/.exec(runMd);
    const check = /`check --name` exits (\d+)/.exec(runMd);
    expect(listed, 'run.md names the exit of release, history and status --name').not.toBeNull();
    expect(check, 'run.md names the exit of check --name').not.toBeNull();
    expect(withStore('migrate').status).toBe(0);
    for (const args of [['release'], ['history'], ['status']]) {
      expect(withStore(...args, '--name', 'never-ran').status, args[0]).toBe(Number(listed![1]));
    }
    expect(withStore('check', '--name', 'never-ran').status).toBe(Number(check![1]));
  });
});

describe('table columns in the docs', () => {
  /** Each header's columns, as the CLI prints them (two or more spaces apart). */
  const headers = new Map<string, string[]>();
  const columns = (line: string): string[] => line.trim().split(/ {2,}/);
  let statusText = '';

  beforeAll(() => {
    const minute = (back: number): string => new Date(Math.floor(Date.now() / 60_000 - back) * 60_000).toISOString();
    expect(withStore('migrate').status).toBe(0);
    // A healthy job, and one whose latest occurrence is overdue (its last run ten minutes ago).
    const run = (name: string, schedule: string, at: string): void => {
      const r = withStore(
        'run',
        '--name',
        name,
        '--schedule',
        schedule,
        '--window-from-schedule',
        '--scheduled-time',
        at,
        '--',
        'true',
      );
      expect(r.status, r.stderr).toBe(0);
    };
    run('healthy', '* * * * *', minute(0));
    run('stopped', '* * * * *', minute(10));
    // Registered an hour ago (ticks before a job's registration are not expected of it): every
    // minute since its run is a due occurrence not completed.
    const db = new Database(state);
    db.prepare(`UPDATE jobs SET created_at = created_at - 3600000 WHERE name = 'stopped'`).run();
    db.close();
    statusText = withStore('status').stdout;
    headers.set('status', columns(statusText.split('\n').find((l) => l.startsWith('JOB '))!));
    const wide = withStore('status', '--wide').stdout;
    headers.set('status --wide', columns(wide.split('\n').find((l) => l.startsWith('JOB '))!));
    headers.set('history', columns(withStore('history', '--name', 'healthy').stdout.split('\n')[0]!));
    headers.set(
      'history --by-occurrence',
      columns(withStore('history', '--name', 'healthy', '--by-occurrence').stdout.split('\n')[0]!),
    );
  });

  it('every example header in the docs is a header the CLI prints, column for column', () => {
    const known = [...headers.values()].map((h) => h.join(' | '));
    const wrong: string[] = [];
    for (const page of PAGES) {
      for (const m of text(page).matchAll(/^ {4}((?:JOB|SEQ|WINDOW) {2,}[A-Z].*)$/gm)) {
        const cols = columns(m[1]!).filter((c) => c !== '...');
        if (!known.some((k) => k.startsWith(cols.join(' | ')))) wrong.push(`${page}: ${m[1]}`);
      }
    }
    expect(wrong, JSON.stringify([...headers])).toEqual([]);
  });

  it('every column the docs name (`NAME` column, or a table header word in backticks) is one the CLI prints', () => {
    const all = new Set([...headers.values()].flat());
    const wrong: string[] = [];
    for (const page of PAGES) {
      for (const m of text(page).matchAll(/`([A-Z][A-Z ()×]*[A-Z)])` columns?/g))
        if (!all.has(m[1]!)) wrong.push(`${page}: ${m[0]}`);
      // status's columns in backticks anywhere, e.g. "`status` (`OPEN WINDOWS`, ...)".
      for (const m of text(page).matchAll(
        /`((?:[A-Z]+ )*(?:WINDOWS|COMPLETED|HOLDER|DUE|GEN|EXPIRES IN|REASON|ATTEMPTS|LEASE|OPEN|SKIPS.*))`/g,
      ))
        if (!all.has(m[1]!)) wrong.push(`${page}: ${m[0]}`);
    }
    expect(wrong).toEqual([]);
    expect(headers.get('status')).toEqual(['JOB', 'LEASE', 'LAST COMPLETED', 'OPEN', 'DUE']);
    expect(headers.get('status --wide')).toEqual(
      expect.arrayContaining(['DUE', 'NOT COMPLETED', 'OPEN WINDOWS', 'HOLDER']),
    );
  });

  it("the DUE column's values are the ones monitoring.md gives: on time, or OVERDUE <window> with the count", () => {
    const said = /in its `DUE` column \(`on time`, or `OVERDUE <window>`, with how many due occurrences/.test(
      text('docs/monitoring.md').replace(/\s+/g, ' '),
    );
    expect(said, 'monitoring.md says what DUE shows').toBe(true);
    const at = headers.get('status')!.indexOf('DUE');
    const header = statusText.split('\n').find((l) => l.startsWith('JOB '))!;
    const start = header.indexOf('DUE');
    expect(statusText).toContain('healthy');
    const due = (job: string): string =>
      statusText
        .split('\n')
        .find((l) => l.startsWith(`${job} `))!
        .slice(start)
        .trim()
        .split(/ {2,}/)[0]!;
    expect(at).toBeGreaterThan(0);
    expect(due('healthy')).toMatch(/^(on time|not due yet)$/); // registered after its latest due tick: not yet expected
    expect(due('stopped')).toMatch(/^OVERDUE \S+, \d+ not completed \(oldest \S+\)$/);
  });
});
