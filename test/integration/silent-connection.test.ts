// One connection that goes silent (a NAT or firewall forgetting it: no answer, no reset) at each
// statement a command sends: every wait on the database is bounded, and the runner retries on a
// new connection while its lease lasts.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { startProxy, type Proxy } from '../helpers/proxy.mjs';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-silent-');
let db: TestDb;
let proxy: Proxy;
beforeAll(async () => {
  db = await testDb();
  proxy = await startProxy(db.url);
});
afterAll(async () => {
  await proxy.close();
  await db.close();
});

const via = (name: string): string[] => ['--database-url', proxy.url(db.url), '--schema', db.schema, '--name', name];
const direct = (name: string): string[] => ['--database-url', db.url, '--schema', db.schema, '--name', name];
const elapsedSince = (t0: number): number => performance.now() - t0;
/** When the run logged `msg` (ms since the epoch). */
const loggedAt = (lines: Array<Record<string, unknown>>, msg: string): number =>
  Date.parse(String(lines.find((l) => l.msg === msg)?.time));

/** A run whose statement containing `text` goes silent, SIGTERMed once it was sent: its result, and how long it took after the signal. */
async function signalledWhileSilent(text: string, name: string) {
  const seen = proxy.silence(text);
  const run = startCli(['run', ...via(name), '--window', 'w', '--', 'true']);
  await seen;
  const t0 = performance.now();
  run.kill('SIGTERM');
  const r = await run;
  return { r, afterSignalMs: elapsedSince(t0), msgs: logLines(r.stderr).map((l) => l.msg) };
}

describe('a connection that goes silent', () => {
  it('at acquire: run exits 69 by the stop point, runs nothing, and a retry completes the window', async () => {
    const marks = path.join(tmp, 'acquire.txt');
    const seen = proxy.silence('.acquire');
    const t0 = performance.now();
    // TTL 6 s, grace 1 s: an answer later than 4.4 s could not be used anyway.
    const r = await runCli(
      [
        'run',
        ...via('silent-acquire'),
        '--window',
        'w',
        '--ttl',
        '6s',
        '--kill-grace',
        '1s',
        '--',
        process.execPath,
        fixture('append-pid.mjs'),
        marks,
      ],
      {},
      { timeoutMs: 30_000 },
    );
    await seen;
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toMatch(/did not answer within 4400 ms/);
    // Bounds in this file are far from the wait they rule out (a hang, a 30 s acquire, a 90 s
    // TTL), never close to the expected time: a busy 2-core machine must not fail them.
    expect(elapsedSince(t0)).toBeLessThan(25_000);
    expect(r.stderr).not.toMatch(/at .*\.js:\d+/); // one line, no stack
    const again = await runCli([
      'run',
      ...via('silent-acquire'),
      '--window',
      'w',
      '--ttl',
      '6s',
      '--kill-grace',
      '1s',
      '--',
      process.execPath,
      fixture('append-pid.mjs'),
      marks,
    ]);
    expect(again.exitCode, again.all).toBe(0);
    expect(readFileSync(marks, 'utf8').trim().split('\n')).toHaveLength(1);
  });

  it('at acquire: SIGTERM to the runner is honoured at once (exit 143)', async () => {
    const { r, afterSignalMs, msgs } = await signalledWhileSilent('.acquire', 'silent-term');
    expect(r.exitCode, r.all).toBe(143);
    // The default TTL would let the acquire wait 30 s; once signalled: 0.3 s for its answer, 0.6 s to give back
    // what it may have taken (answered at once here: a new connection), 0.25 s to close. Bounded well
    // under the 30 s, not near the 1.2 s, so that load cannot fail it.
    expect(afterSignalMs).toBeLessThan(10_000);
    expect(msgs).toContain('signal received while waiting for the database');
    // No child was started: nothing to stop.
    expect(msgs).toContain('signal received');
    expect(msgs).not.toContain('signal received, stopping child');
  });

  it('at the busy-skip event: the contender still leaves with exit 0', async () => {
    // With --on-busy skip the busy-skip rides in the acquire's own statement; --on-busy replace
    // facing the same occurrence skips after asking, and records its busy-skip on its own.
    const holder = startCli([
      'run',
      ...direct('silent-busy'),
      '--window',
      'w',
      '--ttl',
      '20s',
      '--',
      process.execPath,
      fixture('sleep-then.mjs'),
      '15000',
      '0',
    ]);
    try {
      await waitFor(
        'holder to take the lease',
        async () =>
          (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'silent-busy' AND expires_at > now()`))
            .length > 0,
      );
      const seen = proxy.silence('.record_event(');
      const t0 = performance.now();
      const r = await runCli(
        [
          'run',
          ...via('silent-busy'),
          '--window',
          'w',
          '--scheduled-time',
          new Date().toISOString(),
          '--on-busy',
          'replace',
          '--',
          'true',
        ],
        {},
        { timeoutMs: 30_000 },
      );
      await seen;
      expect(r.exitCode, r.all).toBe(0);
      expect(logLines(r.stderr).some((l) => l.msg === 'lease busy')).toBe(true);
      expect(elapsedSince(t0)).toBeLessThan(25_000);
    } finally {
      holder.kill('SIGTERM');
      await holder;
    }
  });

  it('at a read: status exits 69 with one line instead of hanging', async () => {
    const seeded = await runCli(['run', ...direct('silent-status'), '--window', 'w', '--', 'true']);
    expect(seeded.exitCode, seeded.all).toBe(0);
    const seen = proxy.silence('open_windows');
    const t0 = performance.now();
    const r = await runCli(
      ['status', '--database-url', proxy.url(db.url), '--schema', db.schema],
      {},
      { timeoutMs: 40_000 },
    );
    await seen;
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toMatch(/did not answer within 10000 ms/);
    expect(elapsedSince(t0)).toBeLessThan(35_000);
  });

  it('at a renewal: the runner retries on a new connection and the run completes', async () => {
    // TTL 6 s, renew every 2 s, stop point 4.4 s after the last good renewal.
    const seen = proxy.silence('.renew');
    const r = await runCli(
      [
        'run',
        ...via('silent-renew'),
        '--window',
        'w',
        '--ttl',
        '6s',
        '--kill-grace',
        '1s',
        '--',
        process.execPath,
        fixture('sleep-then.mjs'),
        '5000',
        '0',
      ],
      {},
      { timeoutMs: 40_000 },
    );
    await seen;
    expect(r.exitCode, r.all).toBe(0);
    const msgs = logLines(r.stderr).map((l) => l.msg);
    expect(msgs).toContain('renewal failed');
    expect(msgs).not.toContain('lease lost');
    const w = await db.rows<{ completed: boolean }>(
      `SELECT completed_at IS NOT NULL AS completed FROM ${db.schema}.windows WHERE job = 'silent-renew'`,
    );
    expect(w).toEqual([{ completed: true }]);
  });

  it('renewals answered too late: the child is stopped (exit 75) and the lease counts as lost, though the finish found it held', async () => {
    // TTL 6 s: the stop point is 4.4 s after the acquire was sent; every renewal runs, but its
    // answer comes 8 s later. The finish is answered at once and finds the lease still held.
    proxy.slowAnswers('.renew', 8_000);
    const r = await runCli(
      [
        'run',
        ...via('slow-renewals'),
        '--window',
        'w',
        '--ttl',
        '6s',
        '--kill-grace',
        '1s',
        '--',
        process.execPath,
        fixture('sleep-then.mjs'),
        '20000',
        '0',
      ],
      {},
      { timeoutMs: 40_000 },
    );
    // Disarmed: the next test's renewals (on new connections) must not be slowed.
    proxy.slowAnswers('\u0000none', 0);
    expect(r.exitCode, r.all).toBe(75);
    const msgs = logLines(r.stderr).map((l) => l.msg);
    expect(msgs).toContain('lease lost');
    expect(msgs).toContain('lease released');
    const events = await db.rows<{ kind: string; aborted: string | null }>(
      `SELECT kind, detail->>'aborted' AS aborted FROM ${db.schema}.events WHERE job = 'slow-renewals' ORDER BY seq`,
    );
    expect(events.filter((e) => e.kind === 'lease-lost')).toEqual([{ kind: 'lease-lost', aborted: 'deadline' }]);
    // The renewals' failures, which could not be recorded while unanswered, come first.
    expect(events.map((e) => e.kind).slice(-2)).toEqual(['renew-failed', 'lease-lost']);
  });

  it('reset while a statement is waiting: the statement fails, the runner does not crash', async () => {
    // The renewal at 2 s goes silent, then its connection is reset: the driver both fails the
    // statement and emits an error on the checked-out connection, which must not be uncaught.
    const seen = proxy.silence('.renew');
    const run = runCli(
      [
        'run',
        ...via('reset-in-flight'),
        '--window',
        'w',
        '--ttl',
        '6s',
        '--kill-grace',
        '1s',
        '--',
        process.execPath,
        fixture('sleep-then.mjs'),
        '5000',
        '0',
      ],
      {},
      { timeoutMs: 40_000 },
    );
    await seen;
    await new Promise((r) => setTimeout(r, 200));
    proxy.cut('reset');
    await new Promise((r) => setTimeout(r, 300));
    proxy.heal();
    const r = await run;
    expect(r.stderr).not.toMatch(/ECONNRESET\n\s+at |Node\.js v/);
    expect(r.exitCode, r.all).toBe(0);
    expect(logLines(r.stderr).map((l) => l.msg)).toContain('renewal failed');
  });

  it('at a renewal, as the child ends: recording the outcome does not queue behind it', async () => {
    // TTL 30 s: the renewal at 10 s may wait 9 s for its answer; the child ends at 11 s.
    const seen = proxy.silence('.renew');
    const r = await runCli(
      [
        'run',
        ...via('silent-renew-end'),
        '--window',
        'w',
        '--ttl',
        '30s',
        '--kill-grace',
        '1s',
        '--',
        process.execPath,
        fixture('sleep-then.mjs'),
        '11000',
        '0',
      ],
      {},
      { timeoutMs: 60_000 },
    );
    await seen;
    expect(r.exitCode, r.all).toBe(0);
    const lines = logLines(r.stderr);
    expect(loggedAt(lines, 'window completed') - loggedAt(lines, 'child exited')).toBeLessThan(3_000);
    expect(lines.map((l) => l.msg)).not.toContain('could not record outcome yet; retrying while the lease lasts');
  });

  it('at finish, then SIGTERM: the runner leaves within seconds, not when the lease runs out', async () => {
    const { r, afterSignalMs, msgs } = await signalledWhileSilent('.finish(', 'silent-finish-term');
    expect(r.exitCode, r.all).toBe(143);
    // 2 s for an answer after the signal, then the connection is closed; the default TTL is 90 s.
    expect(afterSignalMs).toBeLessThan(20_000);
    expect(msgs).toContain('signal received');
    expect(msgs).not.toContain('signal received, stopping child');
    expect(msgs).toContain(
      'could not learn whether the outcome was recorded; if it was not, the lease expires by itself',
    );
  });

  it('at finish, with new connections left unanswered too: every retry keeps within the lease', async () => {
    // TTL 6 s: the retries share what is left of the lease, connecting included; pg's own
    // connect timeout (5 s) would have taken the second one past expiry.
    const seen = proxy.silence('.finish(');
    const run = runCli(
      ['run', ...via('silent-finish-held'), '--window', 'w', '--ttl', '6s', '--kill-grace', '1s', '--', 'true'],
      {},
      { timeoutMs: 40_000 },
    );
    await seen;
    proxy.hold();
    try {
      const r = await run;
      expect(r.exitCode, r.all).toBe(69);
      const lines = logLines(r.stderr);
      const retries = lines.filter((l) => l.msg === 'could not record outcome yet; retrying while the lease lasts');
      expect(retries.length).toBeGreaterThanOrEqual(2);
      const exited = loggedAt(lines, 'child exited');
      expect(Date.parse(String(retries.at(-1)?.time)) - exited).toBeLessThan(6_000);
      // Then one last attempt, 5 s at most, to learn whether an earlier one committed.
      expect(lines.map((l) => l.msg)).toContain(
        'could not record outcome yet; asking once more whether it was recorded',
      );
      expect(
        loggedAt(
          lines,
          'could not learn whether the outcome was recorded; if it was not, the lease expires by itself',
        ) - exited,
      ).toBeLessThan(14_000);
    } finally {
      proxy.heal();
    }
  });

  it('at finish: the outcome is recorded on a new connection while the lease lasts', async () => {
    const seen = proxy.silence('.finish(');
    const r = await runCli(
      ['run', ...via('silent-finish'), '--window', 'w', '--ttl', '6s', '--kill-grace', '1s', '--', 'true'],
      {},
      { timeoutMs: 40_000 },
    );
    await seen;
    expect(r.exitCode, r.all).toBe(0);
    expect(logLines(r.stderr).map((l) => l.msg)).toContain(
      'could not record outcome yet; retrying while the lease lasts',
    );
    const w = await db.rows<{ completed: boolean }>(
      `SELECT completed_at IS NOT NULL AS completed FROM ${db.schema}.windows WHERE job = 'silent-finish'`,
    );
    expect(w).toEqual([{ completed: true }]);
  });

  it('at finish, with a database too slow to answer before the lease ends: a committed outcome still counts', async () => {
    // TTL 6 s: every answer to finish arrives only 8 s after the first was sent, after the lease's
    // expiry. The first attempt committed at once; the last one, after the lease, learns that and
    // the run succeeds (it exited 69 "could not record outcome" before, though its window was completed).
    proxy.slowAnswers('.finish(', 8_000);
    const r = await runCli(
      ['run', ...via('slow-finish'), '--window', 'w', '--ttl', '6s', '--kill-grace', '1s', '--', 'true'],
      {},
      { timeoutMs: 40_000 },
    );
    expect(r.exitCode, r.all).toBe(0);
    const msgs = logLines(r.stderr).map((l) => l.msg);
    expect(msgs).toContain('could not record outcome yet; retrying while the lease lasts');
    expect(msgs).toContain('could not record outcome yet; asking once more whether it was recorded');
    expect(msgs).toContain('window completed');
    const w = await db.rows<{ completed: boolean }>(
      `SELECT completed_at IS NOT NULL AS completed FROM ${db.schema}.windows WHERE job = 'slow-finish'`,
    );
    expect(w).toEqual([{ completed: true }]);
    const ev = await db.rows<{ kind: string }>(
      `SELECT kind FROM ${db.schema}.events WHERE job = 'slow-finish' AND kind IN ('window-completed', 'released', 'lease-lost') ORDER BY seq`,
    );
    expect(ev.map((e) => e.kind)).toEqual(['window-completed', 'released']);
  });

  it('an acquire answered late: the first renewal is due from when it was sent, and the run completes', async () => {
    // TTL 6 s: renew every 2 s, stop point 4.4 s after the acquire was sent. Answered at 3 s, a
    // first renewal put off 2 s from the child's start would come after that stop point.
    proxy.slowAnswers('.acquire', 3_000);
    const r = await runCli(
      [
        'run',
        ...via('slow-acquire'),
        '--window',
        'w',
        '--ttl',
        '6s',
        '--kill-grace',
        '1s',
        '--log-level',
        'debug',
        '--',
        process.execPath,
        fixture('sleep-then.mjs'),
        '3000',
        '0',
      ],
      {},
      { timeoutMs: 40_000 },
    );
    expect(r.exitCode, r.all).toBe(0);
    const lines = logLines(r.stderr);
    expect(lines.map((l) => l.msg)).not.toContain('lease lost');
    expect(loggedAt(lines, 'lease renewed') - loggedAt(lines, 'lease acquired')).toBeLessThan(1_000);
    const w = await db.rows<{ completed: boolean }>(
      `SELECT completed_at IS NOT NULL AS completed FROM ${db.schema}.windows WHERE job = 'slow-acquire'`,
    );
    expect(w).toEqual([{ completed: true }]);
  });

  it('an acquire that committed but was answered after its bound: exit 69, the lease given back, the next run takes it at once, no loss', async () => {
    // TTL 6 s, grace 1 s: the acquire waits 4.4 s; it commits at once, its answer comes at 7 s.
    proxy.slowAnswers('.acquire', 7_000);
    const r = await runCli(
      ['run', ...via('late-acquire'), '--window', 'w', '--ttl', '6s', '--kill-grace', '1s', '--', 'true'],
      {},
      { timeoutMs: 30_000 },
    );
    expect(r.exitCode, r.all).toBe(69);
    expect(logLines(r.stderr).map((l) => l.msg)).toContain('released the lease of an acquire whose answer was lost');
    const again = await runCli([
      'run',
      ...direct('late-acquire'),
      '--window',
      'w',
      '--ttl',
      '6s',
      '--kill-grace',
      '1s',
      '--',
      'true',
    ]);
    expect(again.exitCode, again.all).toBe(0);
    expect(logLines(again.stderr).map((l) => l.msg)).not.toContain('lease held by a stale owner, waiting for expiry');
    const kinds = (
      await db.rows<{ kind: string }>(`SELECT kind FROM ${db.schema}.events WHERE job = 'late-acquire' ORDER BY seq`)
    ).map((e) => e.kind);
    expect(kinds).toEqual([
      'acquired',
      'window-claimed',
      'released',
      'acquired',
      'window-claimed',
      'window-completed',
      'released',
    ]);
  });

  it('SIGTERM while a committed acquire waits for its answer: exit 143 within a second or so, the lease given back', async () => {
    // Its answer held 20 s: exiting within 10 s shows the runner did not wait for it, with room
    // for a slow machine.
    proxy.slowAnswers('.acquire', 20_000);
    const run = startCli(['run', ...via('late-term'), '--window', 'w', '--', 'true']);
    await waitFor(
      'the acquire to commit',
      async () =>
        (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'late-term' AND expires_at > now()`)).length > 0,
    );
    const t0 = performance.now();
    run.kill('SIGTERM');
    const r = await run;
    expect(r.exitCode, r.all).toBe(143);
    expect(elapsedSince(t0)).toBeLessThan(10_000);
    expect(logLines(r.stderr).map((l) => l.msg)).toContain('released the lease of an acquire whose answer was lost');
    expect(
      await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'late-term' AND released_at IS NOT NULL`),
    ).toHaveLength(1);
  });

  it('--on-busy wait with a short --wait-timeout: a first acquire answered in 0.8 s is slow, not unreachable', async () => {
    proxy.slowAnswers('.acquire', 800);
    const r = await runCli(
      ['run', ...via('slow-first'), '--window', 'w', '--on-busy', 'wait', '--wait-timeout', '300ms', '--', 'true'],
      {},
      { timeoutMs: 30_000 },
    );
    expect(r.exitCode, r.all).toBe(0);
    const w = await db.rows<{ completed: boolean }>(
      `SELECT completed_at IS NOT NULL AS completed FROM ${db.schema}.windows WHERE job = 'slow-first'`,
    );
    expect(w).toEqual([{ completed: true }]);
  });

  it('the clock offset recorded is the most precise measurement of the run, not one taken through a slow answer', async () => {
    // TTL 20 s, renew every 6.7 s: the acquire is answered at once, the first renewal 2.5 s late
    // (an offset off by about 1.25 s, with that much uncertainty); the child ends at 10 s. The
    // host's row keeps the acquire's precise figure.
    proxy.slowAnswers('.renew', 2_500);
    const r = await runCli(
      [
        'run',
        ...via('offset-best'),
        '--window',
        'w',
        '--ttl',
        '20s',
        '--kill-grace',
        '1s',
        '--log-level',
        'debug',
        '--',
        process.execPath,
        fixture('sleep-then.mjs'),
        '10000',
        '0',
      ],
      {},
      { timeoutMs: 40_000 },
    );
    expect(r.exitCode, r.all).toBe(0);
    const renewed = logLines(r.stderr).find(
      (l) => l.msg === 'lease renewed' || l.msg === 'clock offset to database is large',
    );
    expect(Number(renewed?.uncertaintyMs)).toBeGreaterThan(1_000);
    const [h] = await db.rows<{ offset_ms: number; uncertainty_ms: number }>(
      `SELECT offset_ms, uncertainty_ms FROM ${db.schema}.hosts`,
    );
    // Relative, not absolute: under load even the acquire's round trip can be slow, but it is the
    // most precise one, and one host's offset to its own database is within its uncertainty.
    expect(h!.uncertainty_ms).toBeLessThan(Number(renewed?.uncertaintyMs));
    expect(Math.abs(h!.offset_ms)).toBeLessThanOrEqual(h!.uncertainty_ms + 50);
  });
});
