// --ping-url, --notify-url and --record-output through the real CLI, against a real HTTP
// receiver on 127.0.0.1 and both stores: what is sent when, that a dead or silent endpoint
// changes neither the exit code nor the outcome, that the URL stays out of logs and history,
// and that the child's output passes through byte for byte while its tail is kept.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ROOT, fixture, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { freePort } from '../helpers/embedded-pg.mjs';
import { startReceiver, type Receiver } from '../helpers/http-receiver.js';
import { tempDirPerTest } from '../helpers/temp.js';
import { attemptSpanId, occurrenceTraceId } from '../../src/trace-context.js';

let db: TestDb;
const newTmp = tempDirPerTest('leasejob-notify-');
const receivers: Receiver[] = [];
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => db.close());
afterEach(async () => {
  await Promise.all(receivers.splice(0).map((r) => r.close()));
});

async function receiver(opts: { silent?: boolean } = {}): Promise<Receiver> {
  const r = await startReceiver(opts);
  receivers.push(r);
  return r;
}

/** A check's key as healthchecks.io would give it: the secret part of the ping URL. */
const KEY = 'f0e1d2c3-b4a5-4697-8899-aabbccddeeff';
const pg = (job: string): string[] => ['--database-url', db.url, '--schema', db.schema, '--name', job];
const exitWith = (code: number): string[] => [process.execPath, fixture('exit-with.mjs'), String(code)];

describe('--ping-url (PostgreSQL)', () => {
  it('a success: /start as the child starts, then the URL itself, with one run id; exit 0', async () => {
    const rx = await receiver();
    const r = await runCli([
      'run',
      ...pg('ping-ok'),
      '--window',
      'w1',
      '--ping-url',
      `${rx.url}/ping/${KEY}`,
      '--',
      ...exitWith(0),
    ]);
    expect(r.exitCode, r.all).toBe(0);
    expect(rx.requests.map((q) => `${q.method} ${q.path}`)).toEqual([`POST /ping/${KEY}/start`, `POST /ping/${KEY}`]);
    const [start, end] = rx.requests;
    expect(start!.query.get('rid')).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(end!.query.get('rid')).toBe(start!.query.get('rid'));
    expect(end!.body.length).toBe(0);
    // The start names the occurrence's trace, as the child's TRACEPARENT does.
    expect(start!.text).toBe(
      `trace_id=${occurrenceTraceId('ping-ok', 'w1')} span_id=${attemptSpanId('ping-ok', 'w1', '1', 1)}\n`,
    );
    expect(String(end!.headers['user-agent'])).toMatch(/^leasejob\//);
  });

  it('a slug URL with a trailing slash: the success ping goes to the slug itself, as /start and failures do', async () => {
    const rx = await receiver();
    for (const [window, code] of [
      ['w1', 0],
      ['w2', 4],
    ] as const) {
      const url = `${rx.url}/ping/${KEY}/nightly-close/`;
      const r = await runCli([
        'run',
        ...pg('ping-slug'),
        '--window',
        window,
        '--ping-url',
        url,
        '--',
        ...exitWith(code),
      ]);
      expect(r.exitCode, r.all).toBe(code);
    }
    expect(rx.requests.map((q) => q.path)).toEqual([
      `/ping/${KEY}/nightly-close/start`,
      `/ping/${KEY}/nightly-close`,
      `/ping/${KEY}/nightly-close/start`,
      `/ping/${KEY}/nightly-close/4`,
    ]);
  });

  it('with --record-output, the ping body starts on a character and is UTF-8 throughout, whatever the child wrote', async () => {
    const rx = await receiver();
    // Five é (2 bytes each) kept as their last 5 bytes: the tail starts inside one.
    const accents = ['-e', "process.stdout.write('é'.repeat(5)); process.exitCode = 3"];
    const r1 = await runCli([
      'run',
      ...pg('ping-utf8'),
      '--window',
      'w1',
      '--ping-url',
      `${rx.url}/ping/${KEY}`,
      '--record-output',
      '5',
      '--',
      process.execPath,
      ...accents,
    ]);
    expect(r1.exitCode, r1.all).toBe(3);
    // Bytes that are not UTF-8 at all (every byte value): sent as text, each bad byte U+FFFD.
    const r2 = await runCli([
      'run',
      ...pg('ping-utf8'),
      '--window',
      'w2',
      '--ping-url',
      `${rx.url}/ping/${KEY}`,
      '--record-output',
      '200',
      '--',
      process.execPath,
      fixture('write-output.mjs'),
      '300',
      '0',
      '5',
    ]);
    expect(r2.exitCode, r2.all).toBe(5);
    const bodies = rx.requests.filter((q) => !q.path.endsWith('/start'));
    expect(bodies.map((q) => q.path)).toEqual([`/ping/${KEY}/3`, `/ping/${KEY}/5`]);
    // The receiver decodes strictly (TextDecoder, fatal): null would mean not UTF-8.
    expect(bodies[0]!.text).toBe('éé');
    expect(bodies[1]!.text).not.toBeNull();
    expect(bodies[1]!.text).toContain('\ufffd');
    // No ping failed (the receiver answers 500 to a body that is not UTF-8, as healthchecks.io).
    const history = JSON.parse((await runCli(['history', ...pg('ping-utf8'), '--json'])).stdout) as Array<{
      kind: string;
    }>;
    expect(history.filter((e) => e.kind === 'notify-failed')).toEqual([]);
  });

  it('a failure: /<exit status> with the output tail as the body; the query of the URL is kept', async () => {
    const rx = await receiver();
    const r = await runCli([
      'run',
      ...pg('ping-fail'),
      '--window',
      'w1',
      '--ping-url',
      `${rx.url}/ping/${KEY}?create=1`,
      '--record-output',
      '4KiB',
      '--',
      'sh',
      '-c',
      'echo first; echo oops >&2; exit 3',
    ]);
    expect(r.exitCode, r.all).toBe(3);
    expect(rx.requests.map((q) => q.path)).toEqual([`/ping/${KEY}/start`, `/ping/${KEY}/3`]);
    expect(rx.requests[1]!.query.get('create')).toBe('1');
    expect(rx.requests[1]!.text).toBe('first\noops\n');
  });

  it('a lost lease: /75, and the webhook says lost', async () => {
    const rx = await receiver();
    const tmp = newTmp();
    const p = startCli([
      'run',
      ...pg('ping-lost'),
      '--window',
      'w1',
      '--ttl',
      '3s',
      '--kill-grace',
      '1s',
      '--ping-url',
      `${rx.url}/ping/${KEY}`,
      '--notify-url',
      `${rx.url}/hook`,
      '--',
      process.execPath,
      fixture('wait-for-file.mjs'),
      path.join(tmp, 'never'),
    ]);
    await waitFor('the start ping', () => rx.requests.some((q) => q.path.endsWith('/start')));
    const released = await runCli([
      'release',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--name',
      'ping-lost',
      '--force',
    ]);
    expect(released.exitCode, released.all).toBe(0);
    const r = await p;
    expect(r.exitCode, r.all).toBe(75);
    expect(rx.requests.filter((q) => q.path.startsWith('/ping')).map((q) => q.path)).toEqual([
      `/ping/${KEY}/start`,
      `/ping/${KEY}/75`,
    ]);
    const hook = rx.requests.find((q) => q.path === '/hook');
    expect(JSON.parse(hook!.text!)).toMatchObject({
      event: 'lost',
      job: 'ping-lost',
      window: 'w1',
      exit_code: 75,
      attempt: 1,
    });
  });

  it('a run that skips sends nothing: busy, and done', async () => {
    const tmp = newTmp();
    const release = path.join(tmp, 'release');
    const holder = startCli([
      'run',
      ...pg('ping-skip'),
      '--window',
      'w1',
      '--',
      process.execPath,
      fixture('wait-for-file.mjs'),
      release,
    ]);
    await waitFor(
      'the holder to take the lease',
      async () =>
        (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'ping-skip' AND released_at IS NULL`)).length ===
        1,
    );
    const rx = await receiver();
    const flags = ['--ping-url', `${rx.url}/ping/${KEY}`, '--notify-url', `${rx.url}/hook`];
    const busy = await runCli(['run', ...pg('ping-skip'), '--window', 'w1', ...flags, '--', ...exitWith(0)]);
    expect(busy.exitCode, busy.all).toBe(0);
    expect(logLines(busy.stderr).map((l) => l.msg)).toContain('lease busy');
    writeFileSync(release, '');
    expect((await holder).exitCode).toBe(0);
    const done = await runCli(['run', ...pg('ping-skip'), '--window', 'w1', ...flags, '--', ...exitWith(0)]);
    expect(done.exitCode, done.all).toBe(0);
    expect(logLines(done.stderr).map((l) => l.msg)).toContain('window already completed');
    expect(rx.requests).toEqual([]);
  });

  it('a dead endpoint (a closed port): the exit code and the outcome stand; a warning and a counted event', async () => {
    const url = `http://127.0.0.1:${await freePort()}/ping/${KEY}`;
    const ok = await runCli([
      'run',
      ...pg('ping-dead'),
      '--window',
      'w1',
      '--ping-url',
      url,
      '--notify-url',
      url,
      '--',
      ...exitWith(0),
    ]);
    expect(ok.exitCode, ok.all).toBe(0);
    expect(
      await db.rows(
        `SELECT 1 FROM ${db.schema}.windows WHERE job = 'ping-dead' AND window_key = 'w1' AND completed_at IS NOT NULL`,
      ),
    ).toHaveLength(1);
    const failed = await runCli([
      'run',
      ...pg('ping-dead'),
      '--window',
      'w2',
      '--ping-url',
      url,
      '--notify-url',
      url,
      '--',
      ...exitWith(4),
    ]);
    expect(failed.exitCode, failed.all).toBe(4);
    const warnings = logLines(failed.stderr).filter((l) => l.msg === 'ping failed' || l.msg === 'notification failed');
    expect(warnings.map((l) => `${l.target} ${l.stage} ${l.level}`).sort()).toEqual([
      'notify failed warn',
      'ping 4 warn',
      'ping start warn',
    ]);
    expect(warnings[0]!.err).toBe('ECONNREFUSED');
    const events = await db.rows<{ detail: Record<string, unknown> }>(
      `SELECT detail FROM ${db.schema}.events WHERE job = 'ping-dead' AND kind = 'notify-failed' ORDER BY seq`,
    );
    expect(events.length).toBe(5);
    expect(JSON.stringify(events)).not.toContain(KEY);
  });

  it('an endpoint that never answers: the child runs, the exit code stands, and the run ends within a few seconds of the child', async () => {
    const rx = await receiver({ silent: true });
    const tmp = newTmp();
    const marker = path.join(tmp, 'ran');
    const started = Date.now();
    const r = await runCli([
      'run',
      ...pg('ping-slow'),
      '--window',
      'w1',
      '--ping-url',
      `${rx.url}/ping/${KEY}`,
      '--notify-url',
      `${rx.url}/hook`,
      '--',
      'sh',
      '-c',
      `touch '${marker}'; exit 5`,
    ]);
    expect(r.exitCode, r.all).toBe(5);
    const lines = logLines(r.stderr);
    const msgs = lines.map((l) => l.msg);
    // The child started before any ping was answered (none ever is), and finished.
    expect(msgs.indexOf('child started')).toBeLessThan(msgs.indexOf('child exited'));
    expect(msgs.indexOf('child exited')).toBeLessThan(msgs.indexOf('ping failed'));
    expect(
      lines
        .filter((l) => l.msg === 'ping failed' || l.msg === 'notification failed')
        .every((l) => l.err === 'timed out'),
    ).toBe(true);
    expect(rx.requests.map((q) => q.path).sort()).toEqual(['/hook', `/ping/${KEY}/5`, `/ping/${KEY}/start`]); // received, never answered
    // Generous: the bound is a few seconds (the requests' own 3 s), far from the 60 s test limit.
    expect(Date.now() - started).toBeLessThan(40_000);
  });

  it('the URL never reaches a log line (debug included), history, or the events', async () => {
    const url = `http://127.0.0.1:${await freePort()}/ping/${KEY}`;
    const r = await runCli(
      ['run', ...pg('ping-mask'), '--window', 'w1', '--log-level', 'debug', '--', ...exitWith(2)],
      { LEASEJOB_PING_URL: url, LEASEJOB_NOTIFY_URL: `${url}/hook` },
    );
    expect(r.exitCode, r.all).toBe(2);
    expect(logLines(r.stderr).some((l) => l.msg === 'ping failed')).toBe(true);
    expect(r.stderr).not.toContain(KEY);
    const h = await runCli([
      'history',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--name',
      'ping-mask',
      '--json',
    ]);
    expect(h.exitCode, h.all).toBe(0);
    expect(h.stdout).not.toContain(KEY);
    expect(JSON.stringify(await db.rows(`SELECT * FROM ${db.schema}.events WHERE job = 'ping-mask'`))).not.toContain(
      KEY,
    );
    expect(JSON.stringify(await db.rows(`SELECT * FROM ${db.schema}.jobs WHERE name = 'ping-mask'`))).not.toContain(
      KEY,
    );
  });

  it('the child does not get LEASEJOB_PING_URL or LEASEJOB_NOTIFY_URL', async () => {
    const rx = await receiver();
    const file = path.join(newTmp(), 'env.json');
    const r = await runCli(
      ['run', ...pg('ping-env'), '--window', 'w1', '--', process.execPath, fixture('write-env.mjs'), file],
      { LEASEJOB_PING_URL: `${rx.url}/ping/${KEY}`, LEASEJOB_NOTIFY_URL: `${rx.url}/hook` },
    );
    expect(r.exitCode, r.all).toBe(0);
    const env = JSON.parse((await import('node:fs')).readFileSync(file, 'utf8')) as Record<string, string>;
    expect(env.LEASEJOB_PING_URL).toBeUndefined();
    expect(env.LEASEJOB_NOTIFY_URL).toBeUndefined();
    expect(rx.requests.map((q) => q.path)).toEqual([`/ping/${KEY}/start`, `/ping/${KEY}`]);
  });

  it('bad values: exit 64, the URL not echoed, nothing written', async () => {
    const bad = await runCli([
      'run',
      ...pg('ping-bad'),
      '--window',
      'w1',
      '--ping-url',
      `ftp://x/${KEY}`,
      '--',
      ...exitWith(0),
    ]);
    expect(bad.exitCode, bad.all).toBe(64);
    expect(bad.stderr).toMatch(/Expected `--ping-url` \(or LEASEJOB_PING_URL\) to be an http:\/\/ or https:\/\/ URL/);
    expect(bad.stderr).not.toContain(KEY);
    const notify = await runCli([
      'run',
      ...pg('ping-bad'),
      '--window',
      'w1',
      '--notify-url',
      KEY,
      '--',
      ...exitWith(0),
    ]);
    expect(notify.exitCode, notify.all).toBe(64);
    expect(notify.stderr).not.toContain(KEY);
    for (const size of ['1MiB', '0', 'lots']) {
      const r = await runCli([
        'run',
        ...pg('ping-bad'),
        '--window',
        'w1',
        '--record-output',
        size,
        '--',
        ...exitWith(0),
      ]);
      expect(r.exitCode, r.all).toBe(64);
      expect(r.stderr).toContain('Expected `--record-output` to be a size from 1 byte to 64KiB');
    }
    expect(await db.rows(`SELECT 1 FROM ${db.schema}.jobs WHERE name = 'ping-bad'`)).toHaveLength(0);
  });
});

describe('--notify-url (PostgreSQL)', () => {
  it('a failed window: one JSON POST with the job, window, attempt, exit status, host and output tail; a success sends none', async () => {
    const rx = await receiver();
    const fail = await runCli([
      'run',
      ...pg('hook-fail'),
      '--window',
      'w1',
      '--notify-url',
      `${rx.url}/hook`,
      '--record-output',
      '1KiB',
      '--',
      'sh',
      '-c',
      'echo disk full >&2; exit 7',
    ]);
    expect(fail.exitCode, fail.all).toBe(7);
    expect(rx.requests).toHaveLength(1);
    const q = rx.requests[0]!;
    expect(q.method).toBe('POST');
    expect(q.headers['content-type']).toBe('application/json');
    const body = JSON.parse(q.text!) as Record<string, unknown>;
    expect(body).toMatchObject({
      event: 'failed',
      job: 'hook-fail',
      window: 'w1',
      attempt: 1,
      generation: '1',
      exit_code: 7,
      child_exit_code: 7,
      signal: null,
      output: { tail: 'disk full\n', bytes: 10, truncated: false },
    });
    expect(typeof body.host).toBe('string');
    // The trace the child's TRACEPARENT named: the occurrence's, and the attempt's span.
    expect([body.trace_id, body.span_id]).toEqual([
      occurrenceTraceId('hook-fail', 'w1'),
      attemptSpanId('hook-fail', 'w1', '1', 1),
    ]);
    expect(Date.parse(String(body.started_at))).toBeLessThanOrEqual(Date.parse(String(body.finished_at)));
    const ok = await runCli([
      'run',
      ...pg('hook-fail'),
      '--window',
      'w1',
      '--notify-url',
      `${rx.url}/hook`,
      '--',
      ...exitWith(0),
    ]);
    expect(ok.exitCode, ok.all).toBe(0);
    expect(rx.requests).toHaveLength(1);
  });

  it('examples/notify-receiver.mjs prints what it receives', async () => {
    const port = await freePort();
    const rx = execa(process.execPath, [path.join(ROOT, 'examples', 'notify-receiver.mjs'), String(port), 'tok'], {
      reject: false,
      all: true,
    });
    try {
      let out = '';
      rx.all!.on('data', (c: Buffer) => (out += c.toString()));
      await waitFor('the receiver to listen', () => out.includes('listening'));
      const r = await runCli([
        'run',
        ...pg('hook-example'),
        '--window',
        'w9',
        '--notify-url',
        `http://127.0.0.1:${port}/leasejob?token=tok`,
        '--record-output',
        '--',
        'sh',
        '-c',
        'echo cannot reach the bank; exit 2',
      ]);
      expect(r.exitCode, r.all).toBe(2);
      await waitFor('the receiver to print it', () => out.includes('| cannot reach the bank'));
      expect(out).toMatch(/ hook-example window w9 attempt 1 on \S+: failed, exit 2\n/);
    } finally {
      rx.kill();
      await rx;
    }
  });

  it('a missed occurrence: the webhook says missed; a ping URL gets nothing', async () => {
    const rx = await receiver();
    const r = await runCli([
      'run',
      ...pg('hook-missed'),
      '--window',
      'old',
      '--scheduled-time',
      '2020-01-01T00:00:00Z',
      '--max-delay',
      '1m',
      '--notify-url',
      `${rx.url}/hook`,
      '--ping-url',
      `${rx.url}/ping/${KEY}`,
      '--',
      ...exitWith(0),
    ]);
    expect(r.exitCode, r.all).toBe(0);
    expect(rx.requests.map((q) => q.path)).toEqual(['/hook']);
    expect(JSON.parse(rx.requests[0]!.text!)).toMatchObject({
      event: 'missed',
      job: 'hook-missed',
      window: 'old',
      scheduled_at: '2020-01-01T00:00:00.000Z',
    });
  });
});

/** leasejob run with raw stdout and stderr (Buffers). */
async function runRaw(args: string[]) {
  return execa(process.execPath, [BIN, ...args], {
    reject: false,
    encoding: 'buffer',
    stripFinalNewline: false,
    timeout: 60_000,
  });
}

function expectedStdout(n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = i % 256;
  return b;
}
const expectedStderr = (lines: number): string => Array.from({ length: lines }, (_, i) => `err ${i}\n`).join('');

describe('--record-output', () => {
  for (const store of ['postgresql', 'sqlite'] as const) {
    it(`${store}: the output passes through byte for byte on both streams; the last N bytes are kept with the window and shown by history`, async () => {
      const tmp = newTmp();
      const where =
        store === 'postgresql'
          ? ['--database-url', db.url, '--schema', db.schema]
          : ['--state-file', path.join(tmp, 'state.db')];
      const job = `rec-${store}`;
      // 300 kB of stdout: more than a pipe holds, so back-pressure is exercised.
      const r = await runRaw([
        'run',
        ...where,
        '--name',
        job,
        '--window',
        'w1',
        '--log-level',
        'error',
        '--record-output',
        '2KiB',
        '--',
        process.execPath,
        fixture('write-output.mjs'),
        '300000',
        '40',
        '3',
      ]);
      expect(r.exitCode, Buffer.from(r.stderr).toString()).toBe(3);
      expect(r.stdout.length).toBe(300_000);
      expect(Buffer.compare(r.stdout, expectedStdout(300_000))).toBe(0);
      expect(Buffer.from(r.stderr).toString()).toBe(expectedStderr(40));
      const hist = await runCli(['history', ...where, '--name', job, '--json']);
      expect(hist.exitCode, hist.all).toBe(0);
      const events = JSON.parse(hist.stdout) as Array<{
        kind: string;
        output?: { tail: string; bytes: number; kept: number; attempt: number };
      }>;
      const failed = events.find((e) => e.kind === 'window-failed');
      expect(failed?.output).toMatchObject({ bytes: 300_000 + expectedStderr(40).length, kept: 2048, attempt: 1 });
      const text = await runCli(['history', ...where, '--name', job]);
      expect(text.stdout).toMatch(
        /output of window w1, generation \d+ \(seq \d+, attempt 1, window-failed\), the last 2048 of 300\d+ bytes:\n/,
      );
      // One stream alone: the tail is exactly its last bytes (two streams interleave as they are read).
      const one = await runRaw([
        'run',
        ...where,
        '--name',
        job,
        '--window',
        'w2',
        '--log-level',
        'error',
        '--record-output',
        '1000',
        '--',
        process.execPath,
        fixture('write-output.mjs'),
        '5000',
        '0',
        '0',
      ]);
      expect(one.exitCode).toBe(0);
      const again = JSON.parse((await runCli(['history', ...where, '--name', job, '--json'])).stdout) as Array<{
        kind: string;
        window: string;
        output?: { tail: string; bytes: number; kept: number };
      }>;
      const completed = again.find((e) => e.kind === 'window-completed' && e.window === 'w2');
      expect(completed?.output).toMatchObject({
        bytes: 5000,
        kept: 1000,
        tail: expectedStdout(5000).subarray(4000).toString('utf8'),
      });
      if (store === 'postgresql') {
        const [row] = await db.rows<{ output_tail: Buffer; output_bytes: string }>(
          `SELECT output_tail, output_bytes FROM ${db.schema}.windows WHERE job = $1 AND window_key = 'w1'`,
          [job],
        );
        expect(row!.output_tail.length).toBe(2048);
        expect(Number(row!.output_bytes)).toBe(300_000 + expectedStderr(40).length);
        const [w2] = await db.rows<{ output_tail: Buffer }>(
          `SELECT output_tail FROM ${db.schema}.windows WHERE job = $1 AND window_key = 'w2'`,
          [job],
        );
        expect(Buffer.compare(w2!.output_tail, expectedStdout(5000).subarray(4000))).toBe(0);
      }
    });
  }

  it('sqlite: pings and the webhook as with PostgreSQL, the tail as the failure ping body', async () => {
    const rx = await receiver();
    const state = path.join(newTmp(), 'state.db');
    const ok = await runCli([
      'run',
      '--state-file',
      state,
      '--name',
      'lite',
      '--window',
      'w1',
      '--ping-url',
      `${rx.url}/p/${KEY}`,
      '--',
      ...exitWith(0),
    ]);
    expect(ok.exitCode, ok.all).toBe(0);
    const fail = await runCli([
      'run',
      '--state-file',
      state,
      '--name',
      'lite',
      '--window',
      'w2',
      '--ping-url',
      `${rx.url}/p/${KEY}`,
      '--notify-url',
      `${rx.url}/hook`,
      '--record-output',
      '--',
      'sh',
      '-c',
      'echo bad; exit 9',
    ]);
    expect(fail.exitCode, fail.all).toBe(9);
    // The ping and the webhook go side by side: their order between them is not fixed.
    expect(rx.requests.filter((q) => q.path !== '/hook').map((q) => q.path)).toEqual([
      `/p/${KEY}/start`,
      `/p/${KEY}`,
      `/p/${KEY}/start`,
      `/p/${KEY}/9`,
    ]);
    expect(rx.requests.filter((q) => q.path === '/hook')).toHaveLength(1);
    expect(rx.requests.find((q) => q.path.endsWith('/9'))!.text).toBe('bad\n');
    expect(JSON.parse(rx.requests.find((q) => q.path === '/hook')!.text!)).toMatchObject({
      event: 'failed',
      job: 'lite',
      window: 'w2',
      exit_code: 9,
    });
    const h = await runCli(['history', '--state-file', state, '--name', 'lite']);
    expect(h.stdout).toMatch(/output of window w2, generation \d+ \(seq/);
    expect(h.stdout).not.toContain(KEY);
  });

  it('without the flag the child inherits stdout and stderr, and no output is kept', async () => {
    const r = await runRaw([
      'run',
      ...pg('rec-off'),
      '--window',
      'w1',
      '--log-level',
      'error',
      '--',
      process.execPath,
      fixture('write-output.mjs'),
      '1000',
      '3',
      '0',
    ]);
    expect(r.exitCode).toBe(0);
    expect(Buffer.compare(r.stdout, expectedStdout(1000))).toBe(0);
    expect(
      await db.rows(`SELECT 1 FROM ${db.schema}.windows WHERE job = 'rec-off' AND output_at IS NOT NULL`),
    ).toHaveLength(0);
  });
});
