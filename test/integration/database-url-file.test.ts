// --database-url-file and LEASEJOB_DATABASE_URL_FILE (issue 20): the URL read from a file (a
// Kubernetes Secret volume) is nowhere a child running as the same user can read it: not in
// leasejob's /proc environ or command line. Precedence as DESIGN.md says; a file that cannot
// be read, an empty one, or two sources given at one level: exit 64, nothing written.
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { NO_DB_ENV } from '../helpers/both-stores.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-url-file-');
let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db.close();
});

/** A file holding the test database's URL, with the line end a Secret or an editor leaves. */
function urlFile(name: string, text = `${db.url}\n`): string {
  const file = path.join(tmp, name);
  writeFileSync(file, text, { mode: 0o600 });
  return file;
}

/**
 * A child that looks for the URL where a process of the same user can: leasejob's environ and
 * command line (its pid is in LEASEJOB_OWNER, host:pid:nonce). Prints `environ`, `cmdline`, or
 * `nowhere`.
 */
const snoop = (url: string): string[] => {
  // The URL reaches the child in a file: as an argument it would be in leasejob's cmdline itself.
  const needle = path.join(tmp, `needle-${Math.random().toString(36).slice(2)}`);
  writeFileSync(needle, url);
  return [
    'sh',
    '-c',
    `pid=$(echo "$LEASEJOB_OWNER" | cut -d: -f2); url=$(cat "$1"); found=nowhere
     if tr '\\0' '\\n' < /proc/$pid/environ | grep -qF "$url"; then found=environ; fi
     if tr '\\0' '\\n' < /proc/$pid/cmdline | grep -qF "$url"; then found="$found cmdline"; fi
     echo "$found"`,
    'snoop',
    needle,
  ];
};

describe('the database URL from a file', () => {
  it('--database-url-file: the run connects, and a child of the same user finds the URL in neither environ nor cmdline', async () => {
    const r = await runCli(
      [
        'run',
        '--database-url-file',
        urlFile('flag'),
        '--schema',
        db.schema,
        '--name',
        'url-file',
        '--',
        ...snoop(db.url),
      ],
      NO_DB_ENV,
    );
    expect(r.exitCode, r.all).toBe(0);
    expect(r.stdout.trim()).toBe('nowhere');
  });

  it('LEASEJOB_DATABASE_URL_FILE likewise; given by LEASEJOB_DATABASE_URL, the URL is in environ (what security.md says)', async () => {
    const r = await runCli(['run', '--schema', db.schema, '--name', 'url-env-file', '--', ...snoop(db.url)], {
      ...NO_DB_ENV,
      LEASEJOB_DATABASE_URL_FILE: urlFile('env'),
    });
    expect(r.exitCode, r.all).toBe(0);
    expect(r.stdout.trim()).toBe('nowhere');
    const e = await runCli(['run', '--schema', db.schema, '--name', 'url-env', '--', ...snoop(db.url)], {
      ...NO_DB_ENV,
      LEASEJOB_DATABASE_URL: db.url,
    });
    expect(e.exitCode, e.all).toBe(0);
    expect(e.stdout.trim()).toBe('environ');
  });

  it('precedence: the flag file before LEASEJOB_DATABASE_URL; LEASEJOB_DATABASE_URL_FILE before DATABASE_URL', async () => {
    const nowhere = 'postgres://nobody@127.0.0.1:1/none';
    const a = await runCli(
      ['run', '--database-url-file', urlFile('prec-a'), '--schema', db.schema, '--name', 'prec-a', '--', 'true'],
      { ...NO_DB_ENV, LEASEJOB_DATABASE_URL: nowhere },
    );
    expect(a.exitCode, a.all).toBe(0);
    const b = await runCli(['run', '--schema', db.schema, '--name', 'prec-b', '--', 'true'], {
      ...NO_DB_ENV,
      LEASEJOB_DATABASE_URL_FILE: urlFile('prec-b'),
      DATABASE_URL: nowhere,
    });
    expect(b.exitCode, b.all).toBe(0);
  });

  it('a missing or empty file, or both sources at one level: exit 64 naming it, nothing connects', async () => {
    const cases: Array<[string[], Record<string, string | undefined>, string]> = [
      [
        ['--database-url-file', path.join(tmp, 'missing')],
        {},
        'Cannot read the database URL from `--database-url-file`',
      ],
      [['--database-url-file', urlFile('empty', '\n')], {}, 'got an empty file'],
      [['--database-url', db.url, '--database-url-file', urlFile('both')], {}, 'got both'],
      [[], { LEASEJOB_DATABASE_URL: db.url, LEASEJOB_DATABASE_URL_FILE: urlFile('both-env') }, 'got both'],
    ];
    for (const [flags, env, said] of cases) {
      const r = await runCli(['run', ...flags, '--name', 'bad-url-file', '--', 'true'], { ...NO_DB_ENV, ...env });
      expect(r.exitCode, r.all).toBe(64);
      expect(r.stderr).toContain(said);
    }
  });

  // Issue 44: a FIFO or /dev/zero once hung `run` forever, before any timeout, with nothing logged.
  // Each is judged on the opened file without reading it; the 30 s timeout only keeps a
  // regression from hanging the suite (execa kills the run, and the test fails on its exit).
  it('a FIFO, /dev/zero, a directory or an oversize file: exit 64 saying what it is, nothing read', async () => {
    const fifo = path.join(tmp, 'url.fifo');
    execFileSync('mkfifo', [fifo]);
    const dir = path.join(tmp, 'url-dir');
    mkdirSync(dir);
    const big = urlFile('big', `${db.url}\n${'#'.repeat(70 * 1024)}\n`);
    const cases: Array<[string[], Record<string, string | undefined>, string]> = [
      [['--database-url-file', fifo], {}, `Expected \`--database-url-file\` ${fifo} to be a regular file, got a FIFO.`],
      [
        [],
        { LEASEJOB_DATABASE_URL_FILE: fifo },
        `Expected LEASEJOB_DATABASE_URL_FILE ${fifo} to be a regular file, got a FIFO.`,
      ],
      [['--database-url-file', '/dev/zero'], {}, 'to be a regular file, got a character device.'],
      [[], { LEASEJOB_DATABASE_URL_FILE: '/dev/zero' }, 'to be a regular file, got a character device.'],
      [['--database-url-file', dir], {}, 'to be a regular file, got a directory.'],
      [['--database-url-file', big], {}, 'to hold a database URL (at most 65536 bytes), got '],
    ];
    for (const [flags, env, said] of cases) {
      const r = await runCli(
        ['run', ...flags, '--name', 'bad-url-file', '--', 'true'],
        { ...NO_DB_ENV, ...env },
        {
          timeoutMs: 30_000,
        },
      );
      expect(r.timedOut, `${flags.join(' ')} ${JSON.stringify(env)} hung`).toBe(false);
      expect(r.exitCode, r.all).toBe(64);
      expect(r.stderr).toContain(said);
    }
  }, 240_000);
});
