// Bad input: a documented exit code, a one-line reason that names the flag, and nothing written.
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, waitFor } from '../helpers/cli.js';
import { newSchemaName, testDb, type TestDb } from '../helpers/db.js';
import { withHbaLines } from '../helpers/hba.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-bad-input-');

let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => db.close());

const ok = ['--', process.execPath, fixture('exit-with.mjs'), '0'];

async function rowCount(): Promise<number> {
  const r = await db.rows<{ n: string }>(
    `SELECT (SELECT count(*) FROM ${db.schema}.leases) + (SELECT count(*) FROM ${db.schema}.windows)
          + (SELECT count(*) FROM ${db.schema}.events) + (SELECT count(*) FROM ${db.schema}.jobs) AS n`,
  );
  return Number(r[0]?.n);
}

describe('bad input', () => {
  const c = (): string[] => ['--database-url', db.url, '--schema', db.schema];
  // [what, argv (db flags are added after the command name), exit code, message]
  const cases: Array<[string, string[], number, RegExp]> = [
    [
      'malformed cron',
      ['run', '--name', 'j', '--schedule', '61 * * * *', '--window-from-schedule', ...ok],
      64,
      /--schedule/,
    ],
    [
      'six-field cron',
      ['run', '--name', 'j', '--schedule', '0 0 * * * *', '--window-from-schedule', ...ok],
      64,
      /--schedule/,
    ],
    [
      'three-field cron',
      ['run', '--name', 'j', '--schedule', '* * *', '--window-from-schedule', ...ok],
      64,
      /--schedule/,
    ],
    ['@reboot', ['run', '--name', 'j', '--schedule', '@reboot', '--window-from-schedule', ...ok], 64, /--schedule/],
    [
      'a cron that never fires',
      ['run', '--name', 'j', '--schedule', '0 0 30 2 *', '--window-from-schedule', ...ok],
      64,
      /--schedule/,
    ],
    [
      'unknown zone',
      ['run', '--name', 'j', '--schedule', '0 * * * *', '--tz', 'Mars/Olympus', '--window-from-schedule', ...ok],
      64,
      /--tz.*Mars\/Olympus/,
    ],
    ['empty zone', ['run', '--name', 'j', '--tz', '', ...ok], 64, /--tz/],
    ['bad duration', ['run', '--name', 'j', '--ttl', 'abc', ...ok], 64, /--ttl.*abc/],
    ['zero TTL', ['run', '--name', 'j', '--ttl', '0s', ...ok], 64, /--ttl. to be a positive duration/],
    ['absurd TTL', ['run', '--name', 'j', '--ttl', '999d', ...ok], 64, /--ttl/],
    ['TTL too short for renewals', ['run', '--name', 'j', '--ttl', '1s', ...ok], 64, /--ttl.*at least/],
    ['negative duration', ['run', '--name', 'j', '--max-runtime', '-5s', ...ok], 64, /--max-runtime/],
    [
      'grace that does not fit the TTL',
      ['run', '--name', 'j', '--ttl', '3s', '--kill-grace', '5s', ...ok],
      64,
      /--kill-grace/,
    ],
    ['bad kill grace', ['run', '--name', 'j', '--kill-grace', 'soon', ...ok], 64, /--kill-grace/],
    ['empty name', ['run', '--name', '', ...ok], 64, /--name/],
    ['blank name', ['run', '--name', '   ', ...ok], 64, /--name/],
    ['name with a control character', ['run', '--name', 'a\u0007b', ...ok], 64, /--name.*control/],
    ['name with a newline', ['run', '--name', 'a\nb', ...ok], 64, /--name.*control/],
    ['name with a line separator', ['run', '--name', 'a\u2028b', ...ok], 64, /--name.*control/],
    ['name of 4 KB', ['run', '--name', 'x'.repeat(4096), ...ok], 64, /--name.*at most/],
    ['missing command', ['run', '--name', 'j'], 64, /command after `--`/],
    [
      'missing --name',
      ['run', ...ok],
      64,
      /^leasejob: Expected `--name` to be a job name like nightly-close, got nothing\.$/m,
    ],
    [
      'mistyped --name',
      ['run', '--nmae', 'j', ...ok],
      64,
      /^leasejob: unknown option '--nmae' \(did you mean --name\?\); see --help$/m,
    ],
    [
      'mistyped --name of history',
      ['history', '--nmae', 'j'],
      64,
      /^leasejob: unknown option '--nmae' \(did you mean --name\?\); see --help$/m,
    ],
    [
      'command without --',
      ['run', '--name', 'j', 'printenv', 'LEASEJOB_NAME', '--name', 'other'],
      64,
      /^leasejob: Expected the command after `--` .*got `printenv LEASEJOB_NAME` before it/m,
    ],
    [
      'command partly before --',
      ['run', '--name', 'j', 'printenv', '--', 'LEASEJOB_NAME'],
      64,
      /got `printenv` before it/,
    ],
    ['unknown flag', ['run', '--name', 'j', '--frobnicate', ...ok], 64, /unknown option/],
    [
      "a command's own option without --",
      ['run', '--name', 'j', 'echo', '-n', 'hi'],
      64,
      /^leasejob: unknown option '-n': if it is the command's, put the command after `--` \(leasejob run --name <job> \[options\] -- <command> \[args\.\.\.\]\); see --help$/m,
    ],
    [
      'a flag where the name goes',
      ['run', '--name', '--rerun', '--window', 'w', ...ok],
      64,
      /^leasejob: Expected `--name` to be a job name like nightly-close, got the option `--rerun`: give the name right after `--name`/m,
    ],
    [
      '--max-runtime past the timer limit',
      ['run', '--name', 'j', '--max-runtime', '30d', ...ok],
      64,
      /--max-runtime.*24 days/,
    ],
    ['bad --on-busy', ['run', '--name', 'j', '--on-busy', 'maybe', ...ok], 64, /--on-busy/],
    ['--wait-timeout without wait', ['run', '--name', 'j', '--wait-timeout', '5s', ...ok], 64, /--wait-timeout/],
    ['bad --log-level', ['run', '--name', 'j', '--log-level', 'loud', ...ok], 64, /--log-level/],
    [
      'window flags together',
      ['run', '--name', 'j', '--window', 'w', '--window-from-schedule', '--schedule', '@daily', ...ok],
      64,
      /either/,
    ],
    [
      '--window-from-schedule without a schedule',
      ['run', '--name', 'j', '--window-from-schedule', ...ok],
      64,
      /--schedule/,
    ],
    ['--rerun without a window', ['run', '--name', 'j', '--rerun', ...ok], 64, /--rerun/],
    ['--max-delay without a window', ['run', '--name', 'j', '--max-delay', '1h', ...ok], 64, /--max-delay/],
    [
      '--window-format without --window-from-schedule',
      ['run', '--name', 'j', '--window-format', 'yyyy', ...ok],
      64,
      /--window-format/,
    ],
    [
      'empty window',
      ['run', '--name', 'j', '--window', '', ...ok],
      64,
      /^leasejob: Expected `--window` to be a window key like 2026-11-30, got an empty string\.$/m,
    ],
    [
      'schema name over 63 characters',
      ['status', '--schema', 'a'.repeat(64)],
      64,
      /--schema.*at most 63 characters\), got one of 64 characters/,
    ],
    [
      'a URL of another database',
      ['run', '--name', 'j', '--database-url', 'mysql://u@h/db', ...ok],
      64,
      /--database-url.*got a mysql:\/\/ URL\./,
    ],
    [
      'bad --scheduled-time',
      ['run', '--name', 'j', '--window', 'w', '--scheduled-time', 'yesterday', ...ok],
      64,
      /--scheduled-time/,
    ],
    [
      '--scheduled-time without offset',
      ['run', '--name', 'j', '--window', 'w', '--scheduled-time', '2026-11-30T00:05:00', ...ok],
      64,
      /--scheduled-time/,
    ],
    [
      'bad --window-offset',
      ['run', '--name', 'j', '--schedule', '@daily', '--window-from-schedule', '--window-offset', 'one day', ...ok],
      64,
      /--window-offset/,
    ],
    [
      'literal --window-format',
      ['run', '--name', 'j', '--schedule', '@daily', '--window-from-schedule', '--window-format', "'static'", ...ok],
      64,
      /--window-format/,
    ],
    [
      '--window-format whose keys recur daily',
      ['run', '--name', 'j', '--schedule', '@daily', '--window-from-schedule', '--window-format', 'HH:mm', ...ok],
      64,
      /--window-format.*HH:mm.*recur/,
    ],
    [
      '--window-format whose keys recur weekly',
      ['run', '--name', 'j', '--schedule', '@daily', '--window-from-schedule', '--window-format', 'EEEE', ...ok],
      64,
      /--window-format.*recur/,
    ],
    [
      '--window-format without the month',
      ['run', '--name', 'j', '--schedule', '@daily', '--window-from-schedule', '--window-format', 'yyyy-dd', ...ok],
      64,
      /--window-format.*recur/,
    ],
    [
      '--window-format giving a key over 200 characters',
      [
        'run',
        '--name',
        'j',
        '--schedule',
        '@daily',
        '--window-from-schedule',
        '--window-format',
        `yyyy-MM-dd'${'x'.repeat(200)}'`,
        ...ok,
      ],
      64,
      /--window-format.*at most 200 characters/,
    ],
    [
      '--window-format giving a control character',
      [
        'run',
        '--name',
        'j',
        '--schedule',
        '@daily',
        '--window-from-schedule',
        '--window-format',
        "yyyy-MM-dd'\u0007'",
        ...ok,
      ],
      64,
      /--window-format.*control/,
    ],
    [
      '--window-format giving a trailing space',
      [
        'run',
        '--name',
        'j',
        '--schedule',
        '@daily',
        '--window-from-schedule',
        '--window-format',
        "yyyy-MM-dd' '",
        ...ok,
      ],
      64,
      /--window-format.*trailing spaces/,
    ],
    [
      '--scheduled-time that is not an occurrence',
      [
        'run',
        '--name',
        'j',
        '--schedule',
        '5 0 * * *',
        '--window-from-schedule',
        '--scheduled-time',
        '2026-11-30T00:07:00Z',
        ...ok,
      ],
      64,
      /--scheduled-time.*occurrence of `--schedule` "5 0 \* \* \*" in UTC.*around it are 2026-11-30T00:05:00Z and 2026-12-01T00:05:00Z/,
    ],
    [
      '--scheduled-time off the schedule with a literal window',
      [
        'run',
        '--name',
        'j',
        '--schedule',
        '@hourly',
        '--window',
        'w',
        '--scheduled-time',
        '2026-11-30T00:00:01Z',
        ...ok,
      ],
      64,
      /--scheduled-time.*occurrence/,
    ],
    ['bad schema name', ['run', '--name', 'j', '--schema', 'x; DROP TABLE y', ...ok], 64, /--schema/],
    ['uppercase schema name', ['status', '--schema', 'LeaseJob'], 64, /--schema/],
    ['not a database URL', ['run', '--name', 'j', '--database-url', 'not a url', ...ok], 64, /--database-url/],
    [
      'a misspelt connection option (pg would connect without TLS)',
      ['run', '--name', 'j', '--database-url', 'postgres://u@127.0.0.1:1/x?sslmod=verify-full', ...ok],
      64,
      /invalid connection option "sslmod" in `--database-url`: did you mean "sslmode"\?/,
    ],
    [
      'require_auth, which pg cannot enforce (it would send a plain password when asked)',
      ['run', '--name', 'j', '--database-url', 'postgres://u@127.0.0.1:1/x?require_auth=scram-sha-256', ...ok],
      64,
      /connection option "require_auth" in `--database-url` is not supported/,
    ],
    ['unknown command', ['frobnicate'], 64, /unknown command/],
    ['mistyped command', ['statsu'], 64, /unknown command 'statsu' \(did you mean status\?\); see --help$/m],
    [
      'mistyped flag',
      ['run', '--name', 'j', '--windwo', 'w', ...ok],
      64,
      /unknown option '--windwo' \(did you mean --window\?\); see --help$/m,
    ],
    ['history without --name', ['history'], 64, /--name/],
    ['history with a bad --limit', ['history', '--name', 'j', '--limit', '0'], 64, /--limit/],
    ['check with --name and --all', ['check', '--name', 'j', '--all'], 3, /either/],
    ['check with a bad --max-hold', ['check', '--max-hold', 'forever'], 3, /--max-hold/],
    ['check with a bad --max-attempts', ['check', '--max-attempts', '0'], 3, /--max-attempts/],
    ['exporter on a bad port', ['exporter', '--port', '99999'], 64, /--port/],
    [
      'exporter on a link-local address without its interface',
      ['exporter', '--host', 'fe80::1', '--port', '0'],
      64,
      /^leasejob: cannot listen on fe80::1 port 0: not an address to listen on .*\(EINVAL\); choose another with --port or --host\.$/m,
    ],
    [
      'exporter on a host name that does not exist',
      ['exporter', '--host', 'no-such-host.invalid', '--port', '0'],
      64,
      /^leasejob: cannot listen on no-such-host\.invalid port 0: no such host name \(ENOTFOUND\); choose another with --port or --host\.$/m,
    ],
    [
      'history of a job that never ran',
      ['history', '--name', 'never-ran'],
      64,
      /^leasejob: no job named "never-ran" has run against .*schema /m,
    ],
    [
      'release of a job that never ran',
      ['release', '--name', 'never-ran'],
      64,
      /^leasejob: no job named "never-ran" has run against .*schema /m,
    ],
    ['release without --name', ['release'], 64, /--name/],
    ['release with a control character', ['release', '--name', 'x\u001b[31m'], 64, /--name.*control/],
    ['status with a 4 KB name', ['status', '--name', 'y'.repeat(4096)], 64, /--name/],
    ['migrate with an empty --grant-to', ['migrate', '--grant-to', ''], 64, /--grant-to/],
  ];
  it.each(cases)(
    '%s: documented exit code, one line naming the problem, nothing written',
    async (_what, argv, code, message) => {
      const [command, ...rest] = argv;
      // Flags given twice: the later wins, so a case's own --schema / --database-url overrides ours.
      const r = await runCli([command!, ...(['frobnicate', 'statsu'].includes(command!) ? [] : c()), ...rest]);
      expect(r.exitCode, r.all).toBe(code);
      expect(r.stderr).toMatch(message);
      expect(r.stderr.trim().split('\n'), r.stderr).toHaveLength(1);
      expect(await rowCount()).toBe(0);
    },
  );

  it('names with SQL metacharacters and unicode are plain values: stored literally, nothing else touched', async () => {
    for (const name of ["x'); DROP TABLE leases; --", 'ジョブ-日次 ✓', 'a"b\\c']) {
      const r = await runCli(['run', ...c(), '--name', name, '--window', "w'1", ...ok]);
      expect(r.exitCode, r.all).toBe(0);
      const rows = await db.rows<{ name: string }>(`SELECT name FROM ${db.schema}.leases WHERE name = $1`, [name]);
      expect(rows).toEqual([{ name }]);
    }
    const w = await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE window_key = $1`, ["w'1"]);
    expect(w).toHaveLength(3);
    await db.rows(
      `DELETE FROM ${db.schema}.windows; DELETE FROM ${db.schema}.events; DELETE FROM ${db.schema}.event_counts; DELETE FROM ${db.schema}.leases; DELETE FROM ${db.schema}.jobs; DELETE FROM ${db.schema}.hosts`,
    );
  });

  it('a bad LEASEJOB_LOG_LEVEL is a usage error (64, one line) for every command, not an internal error', async () => {
    for (const args of [
      ['run', '--name', 'j', '--window', 'w', ...ok],
      ['status'],
      ['history', '--name', 'j'],
      ['check', '--all'],
      ['release', '--name', 'j'],
      ['migrate'],
    ]) {
      const r = await runCli([args[0]!, '--database-url', db.url, '--schema', db.schema, ...args.slice(1)], {
        LEASEJOB_LOG_LEVEL: 'loud',
      });
      // check: the monitoring plugin's UNKNOWN.
      expect(r.exitCode, `${args[0]}: ${r.all}`).toBe(args[0] === 'check' ? 3 : 64);
      expect(r.stderr.trim().split('\n'), args[0]).toHaveLength(1);
      expect(r.stderr).toMatch(/LEASEJOB_LOG_LEVEL/);
    }
  });

  // The commands that read (status, check) report a database they cannot use as run does.
  const reading = (cmd: string): string[] => (cmd === 'run' ? ['run', '--name', 'j', '--window', 'w', ...ok] : [cmd]);

  it('an unreachable database: exit 69 with the target (never the password)', async () => {
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    for (const cmd of ['run', 'status', 'check']) {
      const [command, ...rest] = reading(cmd);
      const r = await runCli([
        command!,
        '--database-url',
        `postgres://u:sentinel-pw-123@127.0.0.1:${port}/db`,
        ...rest,
      ]);
      expect(r.exitCode, `${cmd}: ${r.all}`).toBe(cmd === 'check' ? 3 : 69); // check: UNKNOWN
      expect(r.stderr, cmd).toMatch(/unreachable/);
      if (cmd !== 'run') expect(r.stderr.trim().split('\n'), cmd).toHaveLength(1); // run logs first
      expect(r.all, cmd).not.toContain('sentinel-pw-123');
    }
    // `check --json` still answers JSON on stdout, saying why it has no answer.
    const j = await runCli(['check', '--json', '--database-url', `postgres://u:sentinel-pw-123@127.0.0.1:${port}/db`]);
    expect(j.exitCode, j.all).toBe(3);
    expect(JSON.parse(j.stdout)).toMatchObject({
      error: { code: 'E_DB_UNREACHABLE', exitCode: 3, message: expect.stringMatching(/unreachable/) },
    });
    expect(j.all).not.toContain('sentinel-pw-123');
    const bad = await runCli(['check', '--json', '--max-attempts', '0', ...c()]);
    expect(bad.exitCode, bad.all).toBe(3);
    expect(JSON.parse(bad.stdout)).toMatchObject({
      error: { exitCode: 3, message: expect.stringMatching(/--max-attempts/) },
    });
    // Refused by the argument parser itself: JSON all the same, the stderr line unchanged.
    for (const [args, message] of [
      [['--nmae', 'x'], "unknown option '--nmae' (did you mean --name?); see --help"],
      [['extra'], /^too many arguments for 'check'/],
      [['--name'], "option '--name <job>' argument missing; see --help"],
      [
        ['--log-level', 'loud'],
        /^option '--log-level <level>' argument 'loud' is invalid\. Allowed choices are .*, silent; see --help$/,
      ],
    ] as Array<[string[], string | RegExp]>) {
      const r = await runCli(['check', '--json', ...c(), ...args]);
      expect(r.exitCode, r.all).toBe(3);
      expect(JSON.parse(r.stdout), args.join(' ')).toEqual({
        error: {
          code: 'E_USAGE',
          exitCode: 3,
          message: typeof message === 'string' ? message : expect.stringMatching(message),
        },
      });
      expect(r.stderr.trim()).toBe(`leasejob: ${JSON.parse(r.stdout).error.message}`);
    }
  });

  it('TLS required of a server without it: exit 69, one line naming TLS, no stack trace', async () => {
    const url = new URL(db.url);
    url.searchParams.set('sslmode', 'verify-full');
    for (const cmd of ['run', 'status', 'check']) {
      const [command, ...rest] = reading(cmd);
      const r = await runCli([command!, '--database-url', url.toString(), '--schema', db.schema, ...rest]);
      expect(r.exitCode, `${cmd}: ${r.all}`).toBe(cmd === 'check' ? 3 : 69); // check: UNKNOWN
      expect(r.stderr.trim().split('\n').at(-1), cmd).toMatch(/^leasejob: TLS to .* failed: .*sslmode/);
      expect(r.stderr, cmd).not.toMatch(/internal error|\n\s+at /);
      if (cmd !== 'run') expect(r.stderr.trim().split('\n'), cmd).toHaveLength(1);
      expect(r.all, cmd).not.toContain(url.password);
    }
  });

  it('the exporter on a port already taken: exit 64, one line naming the port', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', () => resolve()));
    const port = (taken.address() as { port: number }).port;
    try {
      const r = await runCli([
        'exporter',
        '--database-url',
        db.url,
        '--schema',
        db.schema,
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
      ]);
      expect(r.exitCode, r.all).toBe(64);
      expect(r.stderr.trim().split('\n').at(-1)).toBe(
        `leasejob: cannot listen on 127.0.0.1 port ${port}: the port is in use (EADDRINUSE); choose another with --port or --host.`,
      );
      expect(r.stderr).not.toMatch(/internal error|\n\s+at /);
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  });

  it('a libpq keyword=value string works as the URL does; a wrong password in one is never printed', async () => {
    const url = new URL(db.url);
    const kv = (pw: string) =>
      `host=${url.hostname} port=${url.port} user=${decodeURIComponent(url.username)} password='${pw}' dbname=${url.pathname.slice(1)}`;
    const good = await runCli([
      'run',
      '--database-url',
      kv(decodeURIComponent(url.password)),
      '--schema',
      db.schema,
      '--name',
      'kv',
      '--window',
      'w',
      '--',
      'sh',
      '-c',
      'echo ran-once',
    ]);
    expect(good.exitCode, good.all).toBe(0);
    expect(good.stdout).toContain('ran-once');
    expect(
      await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE job = 'kv' AND completed_at IS NOT NULL`),
    ).toHaveLength(1);
    const bad = await runCli(['status', '--database-url', kv('sentinel kv-pw'), '--schema', db.schema]);
    expect(bad.exitCode, bad.all).toBe(69);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    expect(bad.all).not.toMatch(/sentinel|kv-pw/);
    await db.rows(
      `DELETE FROM ${db.schema}.windows; DELETE FROM ${db.schema}.events; DELETE FROM ${db.schema}.event_counts; DELETE FROM ${db.schema}.leases; DELETE FROM ${db.schema}.jobs; DELETE FROM ${db.schema}.hosts`,
    );
  });

  it('a connection string the parser does not take as one (a misspelt flag, before `--`): exit 64, its password masked', async () => {
    for (const args of [
      ['run', '--name', 'x', '--window', 'w', '--databaseurl=postgres://u:Zx9secretQ@127.0.0.1:1/db', '--', 'true'],
      ['run', '--name', 'x', '--window', 'w', 'postgres://u:Zx9secretQ@127.0.0.1:1/db'],
      ['check', '--json', '--dburl=host=h password=Zx9secretQ'],
      ['check', '--json', '--database-url', db.url, '--schema', db.schema, '--name', 'postgres://u:Zx9secretQ@h/db'], // no such job: its JSON on stdout too
    ]) {
      const r = await runCli(args);
      expect(r.exitCode, r.all).toBe(args[0] === 'check' ? 3 : 64);
      expect(r.all).not.toContain('Zx9secretQ');
      expect(r.all).toContain('***');
    }
  });

  it('a read-only server (a standby): exit 69, one line saying so, no stack trace, nothing written', async () => {
    const url = new URL(db.url);
    url.searchParams.set('options', '-c default_transaction_read_only=on');
    const ro = await runCli([
      'run',
      '--database-url',
      url.toString(),
      '--schema',
      db.schema,
      '--name',
      'ro',
      '--window',
      'w1',
      '--',
      'true',
    ]);
    expect(ro.exitCode, ro.all).toBe(69);
    expect(
      ro.stderr
        .trim()
        .split('\n')
        .filter((l) => !l.startsWith('{')),
    ).toEqual([
      expect.stringMatching(
        /^leasejob: database at .* refused: cannot execute .* in a read-only transaction \(SQLSTATE 25006\); the server is read-only \(a standby\?\): point leasejob at the primary$/,
      ),
    ]);
    expect(await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE job = 'ro'`)).toEqual([]);
  });

  it('a wrong password: exit 69, and the password is never printed', async () => {
    const url = new URL(db.url);
    url.password = 'sentinel-wrong-pw';
    for (const cmd of ['run', 'status', 'check']) {
      const [command, ...rest] = reading(cmd);
      const r = await runCli([command!, '--database-url', url.toString(), '--schema', db.schema, ...rest]);
      expect(r.exitCode, `${cmd}: ${r.all}`).toBe(cmd === 'check' ? 3 : 69); // check: UNKNOWN
      expect(r.all, cmd).not.toContain('sentinel-wrong-pw');
    }
  });

  it('a password from PGPASSFILE: the run connects, and stderr holds JSON lines only (no driver deprecation warning)', async () => {
    const url = new URL(db.url);
    const file = path.join(tmp, 'pgpass');
    const esc = (v: string) => v.replace(/[\\:]/g, '\\$&');
    writeFileSync(
      file,
      `${url.hostname}:${url.port}:*:${esc(decodeURIComponent(url.username))}:${esc(decodeURIComponent(url.password))}\n`,
      { mode: 0o600 },
    );
    url.password = '';
    const r = await runCli(
      [
        'run',
        '--database-url',
        url.toString(),
        '--schema',
        db.schema,
        '--name',
        'pgpass',
        '--window',
        'w',
        '--',
        'true',
      ],
      { PGPASSFILE: file, PGPASSWORD: undefined },
    );
    expect(r.exitCode, r.all).toBe(0);
    for (const line of r.stderr.trim().split('\n')) expect(() => JSON.parse(line), line).not.toThrow();
    expect(r.stderr).not.toMatch(/DeprecationWarning/);
    expect(
      await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE job = 'pgpass' AND completed_at IS NOT NULL`),
    ).toHaveLength(1);
    await db.rows(
      `DELETE FROM ${db.schema}.windows; DELETE FROM ${db.schema}.events; DELETE FROM ${db.schema}.event_counts; DELETE FROM ${db.schema}.leases; DELETE FROM ${db.schema}.jobs; DELETE FROM ${db.schema}.hosts`,
    );
  });

  it('no password anywhere, on a server that asks for one: exit 69 saying where one is looked for', async (ctx) => {
    const url = new URL(db.url);
    url.password = '';
    const env = { PGPASSFILE: path.join(tmp, 'no-such-pgpass'), PGPASSWORD: undefined };
    const r = await runCli(['status', '--database-url', url.toString(), '--schema', db.schema], env);
    if (r.exitCode === 0) ctx.skip(); // a server that trusts this host asks for none
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr.trim()).toMatch(
      /^leasejob: database refused the connection to .*: it asks for a password and none was found \(empty password returned by client\); give one in the URL, PGPASSWORD, ~\/\.pgpass or PGPASSFILE/,
    );
  });

  it('no password, on a server asking for SCRAM (the default since PostgreSQL 14): exit 69 with the same advice, no stack trace', async (ctx) => {
    // pg_hba.conf gets a line for one new role; skipped where this suite cannot write it (a server elsewhere).
    const role = `lj_scram_${process.pid}`;
    await db.rows(`SET password_encryption = 'scram-sha-256'; CREATE ROLE ${role} LOGIN PASSWORD 'not-given'`);
    try {
      const r = await withHbaLines(
        db,
        [`host all ${role} 127.0.0.1/32 scram-sha-256`, `host all ${role} ::1/128 scram-sha-256`],
        async () => {
          const url = new URL(db.url);
          url.username = role;
          url.password = '';
          const env = { PGPASSFILE: path.join(tmp, 'no-such-pgpass'), PGPASSWORD: undefined };
          // The reload takes a moment: until then the server asks for a plain password.
          return await waitFor('the server to ask for SCRAM', async () => {
            const attempt = await runCli(['status', '--database-url', url.toString(), '--schema', db.schema], env);
            return /none was found;/.test(attempt.stderr) ? attempt : undefined;
          });
        },
      );
      if (r === undefined) ctx.skip();
      expect(r!.exitCode, r!.all).toBe(69);
      expect(r!.stderr.trim()).toMatch(
        /^leasejob: database refused the connection to .*: it asks for a password and none was found; give one in the URL, PGPASSWORD/,
      );
      // The driver's internals are not leasejob's words.
      expect(r!.stderr).not.toMatch(/SASL|SCRAM-SERVER|must be a string/);
      expect(r!.stderr.trim().split('\n')).toHaveLength(1);
    } finally {
      await db.rows(`DROP ROLE IF EXISTS ${role}`);
    }
  });

  it('a password file others may read is ignored with one warning (a JSON log line), though status opens two connections', async (ctx) => {
    const url = new URL(db.url);
    const file = path.join(tmp, 'pgpass-open');
    const esc = (v: string) => v.replace(/[\\:]/g, '\\$&');
    writeFileSync(
      file,
      `${url.hostname}:${url.port}:*:${esc(decodeURIComponent(url.username))}:${esc(decodeURIComponent(url.password))}\n`,
      { mode: 0o644 },
    );
    url.password = '';
    const r = await runCli(['status', '--database-url', url.toString(), '--schema', db.schema], {
      PGPASSFILE: file,
      PGPASSWORD: undefined,
    });
    if (r.exitCode === 0) ctx.skip(); // a server that trusts this host asks for no password
    expect(r.exitCode, r.all).toBe(69);
    const warning = `password file "${file}" has group or world access; permissions should be u=rw (0600) or less`;
    expect(logLines(r.stderr).filter((l) => String(l.msg).startsWith('password file'))).toEqual([
      expect.objectContaining({ level: 'warn', msg: warning }),
    ]);
    // stderr: JSON log lines, then the one-line error.
    const plain = r.stderr
      .trim()
      .split('\n')
      .filter((l) => !l.startsWith('{'));
    expect(plain).toEqual([expect.stringMatching(/^leasejob: database refused the connection/)]);
    // run too: its log stays JSON lines.
    const run = await runCli(
      [
        'run',
        '--database-url',
        url.toString(),
        '--schema',
        db.schema,
        '--name',
        'pgpass-open',
        '--window',
        'w',
        '--',
        'true',
      ],
      { PGPASSFILE: file, PGPASSWORD: undefined },
    );
    expect(run.exitCode, run.all).toBe(69);
    expect(logLines(run.stderr).filter((l) => l.msg === warning)).toHaveLength(1);
    expect(
      run.stderr
        .trim()
        .split('\n')
        .filter((l) => !l.startsWith('{')),
    ).toEqual([expect.stringMatching(/^leasejob: database refused the connection/)]);
  });

  it('a schema that was never migrated: exit 69, the message says leasejob migrate', async () => {
    for (const cmd of ['run', 'status', 'check']) {
      const [command, ...rest] = reading(cmd);
      const r = await runCli([command!, '--database-url', db.url, '--schema', newSchemaName('unmigrated'), ...rest]);
      expect(r.exitCode, `${cmd}: ${r.all}`).toBe(cmd === 'check' ? 3 : 69); // check: UNKNOWN
      expect(r.stderr, cmd).toMatch(/leasejob migrate/);
      if (cmd !== 'run') expect(r.stderr.trim().split('\n'), cmd).toHaveLength(1); // run logs first
    }
  });

  it('--help and --version exit 0', async () => {
    const help = await runCli(['run', '--help']);
    expect(help.exitCode).toBe(0);
    expect(help.stdout).toMatch(/--window-from-schedule/);
    expect(help.stdout).toMatch(/Exit codes/);
    const version = await runCli(['--version']);
    expect(version.exitCode).toBe(0);
    expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });
});

describe('leasejob migrate', () => {
  it('is idempotent and safe when several run at once', async () => {
    const schema = newSchemaName('mig');
    const results = await Promise.all(
      Array.from({ length: 4 }, () => runCli(['migrate', '--database-url', db.url, '--schema', schema])),
    );
    for (const r of results) expect(r.exitCode, r.all).toBe(0);
    const versions = await db.rows<{ version: number }>(`SELECT version FROM ${schema}.migrations ORDER BY version`);
    expect(versions.map((v) => v.version)[0]).toBe(1);
    expect(new Set(versions.map((v) => v.version)).size).toBe(versions.length);
    const again = await runCli(['migrate', '--database-url', db.url, '--schema', schema]);
    expect(again.exitCode).toBe(0);
    expect(again.stderr).toMatch(/schema up to date/);
  });

  it('refuses a schema from a newer leasejob: exit 69', async () => {
    const schema = newSchemaName('newer');
    expect((await runCli(['migrate', '--database-url', db.url, '--schema', schema])).exitCode).toBe(0);
    await db.rows(`INSERT INTO ${schema}.migrations (version, name) VALUES (999, 'future')`);
    const r = await runCli(['migrate', '--database-url', db.url, '--schema', schema]);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toMatch(/newer than this leasejob/);
  });
});
