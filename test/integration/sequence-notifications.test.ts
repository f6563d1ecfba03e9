// --ping-url, --notify-url and --record-output window by window under `run --catch-up` and
// `leasejob backfill`, through the real CLI, against a real HTTP receiver on 127.0.0.1, on both
// stores: each window its own start and end (its own run id, in order), its own output tail;
// missed occurrences to the webhook; a dry run or a skip sends nothing. And `history` text
// output shows a tail's control characters instead of sending them to the terminal.
import { existsSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { startReceiver, type ReceivedRequest, type Receiver } from '../helpers/http-receiver.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-seq-notify-');
let db: TestDb;
const receivers: Receiver[] = [];
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => db.close());
afterEach(async () => {
  await Promise.all(receivers.splice(0).map((r) => r.close()));
});

async function receiver(): Promise<Receiver> {
  const r = await startReceiver();
  receivers.push(r);
  return r;
}

/** The secret part of a healthchecks.io ping URL. */
const KEY = '5e1a7c0d-9b2f-4c3e-8a61-d0f4b2c9e7a3';

const FIVE_MIN = 5 * 60_000;
/** Five-minute ticks: T(4) is the latest tick at least five minutes old. */
const T4 = Math.floor(Date.now() / FIVE_MIN) * FIVE_MIN - FIVE_MIN;
const T = (i: number): string => new Date(T4 - (4 - i) * FIVE_MIN).toISOString().replace('.000Z', 'Z');
const SCHEDULE = ['--schedule', '*/5 * * * *', '--window-from-schedule'];

const HOUR = 3_600_000;
const H0 = Math.floor(Date.now() / HOUR) * HOUR - 6 * HOUR;
/** Hourly occurrences, six hours ago and later. */
const W = (i: number): string => new Date(H0 + i * HOUR).toISOString().replace('.000Z', 'Z');

/** Prints its window, fails with 7 for the window named by FAIL_WINDOW. */
const CHILD = [
  '--',
  'sh',
  '-c',
  'echo "out $LEASEJOB_WINDOW"; [ "$LEASEJOB_WINDOW" = "$FAIL_WINDOW" ] && exit 7; exit 0',
];

interface StoreUnderTest {
  args(): string[];
  registeredAt(job: string, at: string): Promise<void>;
}
const stateFile = path.join(tmp, 'state.db');
const stores: Array<[string, StoreUnderTest]> = [
  [
    'postgresql',
    {
      args: () => ['--database-url', db.url, '--schema', db.schema],
      registeredAt: async (job, at) => {
        await db.rows(`UPDATE ${db.schema}.jobs SET created_at = $2 WHERE name = $1`, [job, at]);
      },
    },
  ],
  [
    'sqlite',
    {
      args: () => ['--state-file', stateFile],
      registeredAt: async (job, at) => {
        const s = new Database(stateFile);
        s.prepare('UPDATE jobs SET created_at = ? WHERE name = ?').run(Date.parse(at), job);
        s.close();
      },
    },
  ],
];

const pings = (rx: Receiver): ReceivedRequest[] => rx.requests.filter((q) => q.path.startsWith('/ping/'));
const hooks = (rx: Receiver): Array<Record<string, unknown>> =>
  rx.requests.filter((q) => q.path === '/hook').map((q) => JSON.parse(q.text!) as Record<string, unknown>);

/** The pings as start/end pairs: each pair one run id, each run id its own. */
function expectPairs(rx: Receiver, ends: string[]): void {
  const p = pings(rx);
  expect(p.map((q) => q.path)).toEqual(ends.flatMap((end) => [`/ping/${KEY}/start`, `/ping/${KEY}${end}`]));
  const rids = p.map((q) => q.query.get('rid'));
  for (let i = 0; i < p.length; i += 2) expect(rids[i + 1]).toBe(rids[i]);
  expect(new Set(rids).size).toBe(ends.length);
}

describe.each(stores)('pings and the webhook per window: %s', (kind, store) => {
  /** A job that ran T(0), registered then, and nothing since. */
  const downSinceT0 = async (job: string): Promise<void> => {
    const first = await runCli([
      'run',
      ...store.args(),
      '--name',
      job,
      ...SCHEDULE,
      '--scheduled-time',
      T(0),
      ...CHILD,
    ]);
    expect(first.exitCode, first.all).toBe(0);
    await store.registeredAt(job, T(0));
  };
  const catchUp = (job: string, at: number, rx: Receiver, extra: string[] = [], env: Record<string, string> = {}) =>
    runCli(
      [
        'run',
        ...store.args(),
        '--name',
        job,
        ...SCHEDULE,
        '--scheduled-time',
        T(at),
        '--catch-up',
        '1h',
        '--ping-url',
        `${rx.url}/ping/${KEY}`,
        '--notify-url',
        `${rx.url}/hook`,
        '--record-output',
        ...extra,
        ...CHILD,
      ],
      env,
    );

  it('run --catch-up of 3 windows: 3 starts and 3 successes, in order, each pair its own run id, each end with its own output', async () => {
    const job = `cu3-${kind}`;
    await downSinceT0(job);
    const rx = await receiver();
    const r = await catchUp(job, 3, rx);
    expect(r.exitCode, r.all).toBe(0);
    expectPairs(rx, ['', '', '']);
    expect(
      pings(rx)
        .filter((_, i) => i % 2 === 1)
        .map((q) => q.text),
    ).toEqual([1, 2, 3].map((i) => `out ${T(i)}\n`));
    expect(hooks(rx)).toEqual([]);
    expect(r.stderr).not.toContain(KEY);
  });

  it('a failing window: its own failure ping with the exit status and its tail, one webhook POST, and nothing for the windows not reached', async () => {
    const job = `cufail-${kind}`;
    await downSinceT0(job);
    const rx = await receiver();
    const r = await catchUp(job, 4, rx, [], { FAIL_WINDOW: T(2) });
    expect(r.exitCode, r.all).toBe(7);
    expectPairs(rx, ['', '/7']);
    expect(pings(rx)[3]!.text).toBe(`out ${T(2)}\n`);
    const sent = hooks(rx);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({
      event: 'failed',
      job,
      window: T(2),
      attempt: 1,
      exit_code: 7,
      child_exit_code: 7,
      missed: null,
      output: { tail: `out ${T(2)}\n` },
    });
  });

  it('occurrences recorded missed by --catch-up-limit: one webhook POST for them all, with the count and the range; no ping for them', async () => {
    const job = `cumiss-${kind}`;
    await downSinceT0(job);
    const rx = await receiver();
    const r = await catchUp(job, 4, rx, ['--catch-up-limit', '1']);
    expect(r.exitCode, r.all).toBe(0);
    // T(1) and T(2) missed; T(3) caught up, then T(4).
    expectPairs(rx, ['', '']);
    const sent = hooks(rx);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({
      event: 'missed',
      job,
      window: T(2),
      scheduled_at: new Date(T(2)).toISOString(),
      attempt: null,
      exit_code: null,
      missed: {
        reason: 'catch-up-limit',
        count: 2,
        oldest_window: T(1),
        oldest_scheduled_at: new Date(T(1)).toISOString(),
        newest_window: T(2),
        newest_scheduled_at: new Date(T(2)).toISOString(),
      },
    });
  });

  it('backfill --ping-url --record-output: each window its own start and end with its own tail; the tails in history; the URL in no log line', async () => {
    const job = `bf-${kind}`;
    const rx = await receiver();
    const r = await runCli([
      'backfill',
      ...store.args(),
      '--name',
      job,
      '--schedule',
      '0 * * * *',
      '--from',
      W(0),
      '--to',
      W(2),
      '--ping-url',
      `${rx.url}/ping/${KEY}`,
      '--record-output',
      '--log-level',
      'debug',
      ...CHILD,
    ]);
    expect(r.exitCode, r.all).toBe(0);
    expectPairs(rx, ['', '', '']);
    expect(
      pings(rx)
        .filter((_, i) => i % 2 === 1)
        .map((q) => q.text),
    ).toEqual([0, 1, 2].map((i) => `out ${W(i)}\n`));
    expect(r.stderr).not.toContain(KEY);
    expect(r.stdout).toContain(`out ${W(0)}\n`);
    const h = await runCli(['history', ...store.args(), '--name', job, '--json']);
    const ends = (JSON.parse(h.stdout) as Array<{ kind: string; window: string; output?: { tail: string } }>).filter(
      (e) => e.kind === 'window-completed',
    );
    expect(ends.map((e) => [e.window, e.output?.tail])).toEqual([0, 1, 2].map((i) => [W(i), `out ${W(i)}\n`]));
    expect(h.stdout).not.toContain(KEY);

    // Everything completed: nothing to run, nothing sent; a dry run sends nothing either.
    const again = await runCli([
      'backfill',
      ...store.args(),
      '--name',
      job,
      '--schedule',
      '0 * * * *',
      '--from',
      W(0),
      '--to',
      W(3),
      '--dry-run',
      '--ping-url',
      `${rx.url}/ping/${KEY}`,
      '--notify-url',
      `${rx.url}/hook`,
    ]);
    expect(again.exitCode, again.all).toBe(0);
    const done = await runCli(
      ['backfill', ...store.args(), '--name', job, '--schedule', '0 * * * *', '--from', W(0), '--to', W(2), ...CHILD],
      { LEASEJOB_PING_URL: `${rx.url}/ping/${KEY}` },
    );
    expect(done.exitCode, done.all).toBe(0);
    expect(rx.requests).toHaveLength(6);
  });

  it('backfill from LEASEJOB_PING_URL and LEASEJOB_NOTIFY_URL: a failed window pings /7 and posts failed; the run stops there', async () => {
    const job = `bfenv-${kind}`;
    const rx = await receiver();
    const r = await runCli(
      ['backfill', ...store.args(), '--name', job, '--schedule', '0 * * * *', '--from', W(0), '--to', W(2), ...CHILD],
      { LEASEJOB_PING_URL: `${rx.url}/ping/${KEY}`, LEASEJOB_NOTIFY_URL: `${rx.url}/hook`, FAIL_WINDOW: W(1) },
    );
    expect(r.exitCode, r.all).toBe(7);
    expectPairs(rx, ['', '/7']);
    expect(hooks(rx)).toMatchObject([{ event: 'failed', job, window: W(1), exit_code: 7, output: null }]);
  });
});

describe('a lease lost during a catch-up (PostgreSQL)', () => {
  it('the window running then pings /75 and posts lost; the earlier one had its success; the later ones send nothing', async () => {
    const job = 'culost';
    const where = ['--database-url', db.url, '--schema', db.schema, '--name', job];
    const out = path.join(tmp, 'culost.jsonl');
    const child = ['--', process.execPath, fixture('append-env.mjs'), out];
    const first = await runCli(['run', ...where, ...SCHEDULE, '--scheduled-time', T(0), ...child]);
    expect(first.exitCode, first.all).toBe(0);
    await db.rows(`UPDATE ${db.schema}.jobs SET created_at = $2 WHERE name = $1`, [job, T(0)]);
    const rx = await receiver();
    const p = startCli([
      'run',
      ...where,
      ...SCHEDULE,
      '--scheduled-time',
      T(4),
      '--catch-up',
      '1h',
      '--ttl',
      '3s',
      '--kill-grace',
      '1s',
      '--ping-url',
      `${rx.url}/ping/${KEY}`,
      '--notify-url',
      `${rx.url}/hook`,
      ...child,
      `block=${T(2)}`,
    ]);
    await waitFor('the second window to block', () => existsSync(`${out}.blocked`));
    const released = await runCli([
      'release',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--name',
      job,
      '--force',
    ]);
    expect(released.exitCode, released.all).toBe(0);
    const r = await p;
    expect(r.exitCode, r.all).toBe(75);
    expectPairs(rx, ['', '/75']);
    expect(hooks(rx)).toMatchObject([{ event: 'lost', job, window: T(2), exit_code: 75 }]);
  });
});

describe('backfill: the flags as run has them', () => {
  it('--help lists them; a bad URL or size is refused with exit 64, the URL not shown, nothing written', async () => {
    const help = await runCli(['backfill', '--help']);
    expect(help.exitCode).toBe(0);
    for (const flag of ['--ping-url <url>', '--notify-url <url>', '--record-output [size]'])
      expect(help.stdout).toContain(flag);
    const where = [
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--name',
      'bf-bad',
      '--schedule',
      '0 * * * *',
      '--from',
      W(0),
      '--to',
      W(1),
    ];
    const bad = await runCli(['backfill', ...where, '--ping-url', `ftp://x/${KEY}`, ...CHILD]);
    expect(bad.exitCode, bad.all).toBe(64);
    expect(bad.stderr).toMatch(/Expected `--ping-url` \(or LEASEJOB_PING_URL\) to be an http:\/\/ or https:\/\/ URL/);
    expect(bad.stderr).not.toContain(KEY);
    const env = await runCli(['backfill', ...where, ...CHILD], { LEASEJOB_NOTIFY_URL: KEY });
    expect(env.exitCode, env.all).toBe(64);
    expect(env.stderr).not.toContain(KEY);
    const size = await runCli(['backfill', ...where, '--record-output', '1MiB', ...CHILD]);
    expect(size.exitCode, size.all).toBe(64);
    expect(size.stderr).toContain('Expected `--record-output` to be a size from 1 byte to 64KiB');
    expect(await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE job = 'bf-bad'`)).toHaveLength(0);
  });
});

describe('history text output', () => {
  it('shows control characters in a recorded tail as escapes (newline and tab kept); --json keeps the tail exact', async () => {
    const where = ['--database-url', db.url, '--schema', db.schema, '--name', 'hist-esc'];
    // A title change, a screen clear, a carriage return, a C1 CSI and a bidi override.
    const printed = 'a\tb\n\x1b]0;pwned\x07\x1b[2J\rX\u009b31m\u202etxt\n';
    const r = await runCli([
      'run',
      ...where,
      '--window',
      'w1',
      '--record-output',
      '--log-level',
      'error',
      '--',
      process.execPath,
      '-e',
      `process.stdout.write(${JSON.stringify(printed)})`,
    ]);
    expect(r.exitCode, r.all).toBe(0);
    const text = await runCli(['history', ...where]);
    expect(text.exitCode, text.all).toBe(0);
    expect(text.stdout).toContain('a\tb\n\\x1b]0;pwned\\x07\\x1b[2J\\x0dX\\x9b31m\\u202etxt');
    // eslint-disable-next-line no-control-regex
    expect(text.stdout).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]/);
    const json = await runCli(['history', ...where, '--json']);
    const ended = (JSON.parse(json.stdout) as Array<{ kind: string; output?: { tail: string } }>).find(
      (e) => e.kind === 'window-completed',
    );
    expect(ended?.output?.tail).toBe(printed);
    expect(logLines(r.stderr)).toEqual([]);
  });
});
