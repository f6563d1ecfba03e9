// Occurrence policies (issue 17): an attempt budget per occurrence (`run --max-attempts`), retries
// inside one run under one lease (`--retries`, `--retry-delay`) and the backoff across triggers,
// in both stores, with real CLI processes and a real failing child. Counts and order come from
// the ledger, the events and the child's own record; no elapsed time is asserted.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, scrapeOnce, startCli, waitFor } from '../helpers/cli.js';
import { bothStores, NO_DB_ENV } from '../helpers/both-stores.js';
import { startReceiver } from '../helpers/http-receiver.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-budget-');
const noDb = NO_DB_ENV;
const { stores } = bothStores('leasejob-budget-state-');

/** The child: one JSON line of its environment appended to `file`, then exit 3 for window `w`. */
const failing = (file: string, w: string): string[] => [
  '--',
  process.execPath,
  fixture('append-env.mjs'),
  file,
  `fail=3=${w}`,
];
const starts = (file: string): Array<Record<string, string>> => {
  try {
    return readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, string>);
  } catch {
    return [];
  }
};

interface Event {
  kind: string;
  window: string | null;
  generation: string | null;
  detail: Record<string, unknown>;
}

function metric(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

describe.each(stores)('occurrence policies in %s', (store, conn) => {
  const tag = store === 'PostgreSQL' ? 'pg' : 'lite';
  const history = async (job: string): Promise<Event[]> => {
    const r = await runCli(['history', ...conn(), '--name', job, '--json', '--limit', '200'], noDb);
    expect(r.exitCode, r.all).toBe(0);
    return JSON.parse(r.stdout) as Event[];
  };

  it('--max-attempts 2: three concurrent triggers of a failing occurrence start the child twice; the third skips as exhausted (exit 0)', async () => {
    const job = `budget-${tag}`;
    const file = path.join(tmp, `${job}.jsonl`);
    const trigger = () =>
      startCli(
        [
          'run',
          ...conn(),
          '--name',
          job,
          '--window',
          'w1',
          '--max-attempts',
          '2',
          '--on-busy',
          'wait',
          ...failing(file, 'w1'),
        ],
        noDb,
      );
    const results = await Promise.all([trigger(), trigger(), trigger()]);
    const codes = results.map((r) => r.exitCode).sort();
    expect(codes, results.map((r) => r.all).join('\n---\n')).toEqual([0, 3, 3]);
    expect(starts(file).map((s) => s.LEASEJOB_ATTEMPT)).toEqual(['1', '2']);
    const skipped = results.find((r) => r.exitCode === 0)!;
    expect(logLines(skipped.stderr).some((l) => String(l.msg).startsWith('occurrence exhausted'))).toBe(true);
    const spent = results.find((r) => r.exitCode === 3 && /exhausted; later triggers skip it/.test(r.stderr));
    expect(spent, 'the run of the last attempt says the occurrence is exhausted').toBeDefined();

    // The occurrence's own history (history --window): two attempts claimed and failed, the third skipped.
    const own = await runCli(['history', ...conn(), '--name', job, '--window', 'w1', '--json'], noDb);
    const events = JSON.parse(own.stdout) as Event[];
    expect(new Set(events.map((e) => e.window))).toEqual(new Set(['w1']));
    expect(events.map((e) => e.kind).filter((k) => k.startsWith('window-') || k.endsWith('-skip'))).toEqual([
      'window-claimed',
      'window-failed',
      'window-claimed',
      'window-failed',
      'exhausted-skip',
    ]);
    expect(events.filter((e) => e.kind === 'window-claimed')).toHaveLength(2);
    const skip = events.filter((e) => e.kind === 'exhausted-skip');
    expect(skip).toHaveLength(1);
    expect(skip[0]!.detail).toMatchObject({ attempts: 2, max_attempts: 2 });

    // Later triggers skip it too, with any budget it has spent; check reports it, the exporter counts it.
    const again = await runCli(
      ['run', ...conn(), '--name', job, '--window', 'w1', '--max-attempts', '2', ...failing(file, 'w1')],
      noDb,
    );
    expect(again.exitCode, again.all).toBe(0);
    expect(starts(file)).toHaveLength(2);
    const check = await runCli(['check', ...conn(), '--name', job], noDb);
    expect(check.exitCode, check.all).toBe(2);
    expect(check.stdout).toMatch(
      new RegExp(`^CRITICAL ${job}: exhausted: window w1 failed all 2 of its attempts`, 'm'),
    );
    const status = JSON.parse((await runCli(['status', ...conn(), '--name', job, '--json'], noDb)).stdout);
    expect(status.jobs[0]).toMatchObject({ exhaustedOccurrences: 1, failedOccurrences: 1 });
    const text = await scrapeOnce(conn(), noDb, { timeoutMs: 120_000 });
    expect(metric(text, 'leasejob_exhausted_occurrences', `job="${job}"`)).toBe(1);
    expect(metric(text, 'leasejob_failed_occurrences', `job="${job}"`)).toBe(1);
    expect(metric(text, 'leasejob_attempt_skips_total', `job="${job}",reason="exhausted"`)).toBe(2);

    // --rerun runs it again whatever the budget says; completed, it is no longer exhausted.
    const rerun = await runCli(
      ['run', ...conn(), '--name', job, '--window', 'w1', '--max-attempts', '2', '--rerun', ...failing(file, 'none')],
      noDb,
    );
    expect(rerun.exitCode, rerun.all).toBe(0);
    expect(starts(file).map((s) => s.LEASEJOB_ATTEMPT)).toEqual(['1', '2', '3']);
    expect((await runCli(['check', ...conn(), '--name', job], noDb)).exitCode).toBe(0);
  });

  it('a failure with attempts left is not a failed occurrence yet; mark closes an exhausted one', async () => {
    const job = `left-${tag}`;
    const file = path.join(tmp, `${job}.jsonl`);
    const run = () =>
      runCli(['run', ...conn(), '--name', job, '--window', 'w1', '--max-attempts', '2', ...failing(file, 'w1')], noDb);
    expect((await run()).exitCode).toBe(3);
    let status = JSON.parse((await runCli(['status', ...conn(), '--name', job, '--json'], noDb)).stdout);
    expect(status.jobs[0]).toMatchObject({ exhaustedOccurrences: 0, failedOccurrences: 0 });
    expect((await run()).exitCode).toBe(3);
    status = JSON.parse((await runCli(['status', ...conn(), '--name', job, '--json'], noDb)).stdout);
    expect(status.jobs[0]).toMatchObject({ exhaustedOccurrences: 1, failedOccurrences: 1 });
    const mark = await runCli(['mark', ...conn(), '--name', job, '--window', 'w1', '--done'], noDb);
    expect(mark.exitCode, mark.all).toBe(0);
    status = JSON.parse((await runCli(['status', ...conn(), '--name', job, '--json'], noDb)).stdout);
    expect(status.jobs[0]).toMatchObject({ exhaustedOccurrences: 0, failedOccurrences: 0 });
    expect((await run()).exitCode).toBe(0);
    expect(starts(file)).toHaveLength(2);
  });

  it('--retries 2 --retry-delay 1s: three tries under one lease, each its own attempt, waiting longer before each retry', async () => {
    const job = `retries-${tag}`;
    const file = path.join(tmp, `${job}.jsonl`);
    const r = await runCli(
      [
        'run',
        ...conn(),
        '--name',
        job,
        '--window',
        'w1',
        '--retries',
        '2',
        '--retry-delay',
        '1s',
        ...failing(file, 'w1'),
      ],
      noDb,
    );
    expect(r.exitCode, r.all).toBe(3);
    const tries = starts(file);
    expect(tries.map((s) => s.LEASEJOB_ATTEMPT)).toEqual(['1', '2', '3']);
    expect(new Set(tries.map((s) => s.FENCE_TOKEN)).size, 'one lease, one fencing token').toBe(1);
    const waits = logLines(r.stderr)
      .filter((l) => l.msg === 'try failed: retrying after the backoff, lease kept')
      .map((l) => ({ retry: l.retry, waitMs: Number(l.waitMs) }));
    expect(waits.map((w) => w.retry)).toEqual([1, 2]);
    expect(waits[1]!.waitMs).toBeGreaterThanOrEqual(waits[0]!.waitMs);
    expect(waits[0]!.waitMs).toBeGreaterThanOrEqual(500);

    const events = await history(job);
    const kinds = events.filter((e) => e.window === 'w1').map((e) => `${e.kind}:${String(e.detail.attempt ?? '')}`);
    expect(kinds.filter((k) => !k.startsWith('acquired') && !k.startsWith('released'))).toEqual([
      'window-claimed:1',
      'window-failed:1',
      'window-claimed:2',
      'window-failed:2',
      'window-claimed:3',
      'window-failed:3',
    ]);
    const generations = new Set(events.filter((e) => e.kind.startsWith('window-')).map((e) => e.generation));
    expect(generations.size).toBe(1);
    expect(events.filter((e) => e.kind === 'acquired')).toHaveLength(1);
    expect(events.filter((e) => e.kind === 'released')).toHaveLength(1);
  });

  it('SIGTERM during the backoff ends the run as a signal does (143), the lease released, no more tries', async () => {
    const job = `retry-signal-${tag}`;
    const file = path.join(tmp, `${job}.jsonl`);
    const p = startCli(
      [
        'run',
        ...conn(),
        '--name',
        job,
        '--window',
        'w1',
        '--retries',
        '3',
        '--retry-delay',
        '1h',
        ...failing(file, 'w1'),
      ],
      noDb,
    );
    let err = '';
    p.stderr?.on('data', (d: Buffer) => (err += d.toString()));
    await waitFor('the first retry to wait', () =>
      logLines(err).some((l) => l.msg === 'try failed: retrying after the backoff, lease kept'),
    );
    p.kill('SIGTERM');
    const r = await p;
    expect(r.exitCode, r.all).toBe(143);
    expect(starts(file)).toHaveLength(1);
    const events = await history(job);
    expect(events.filter((e) => e.kind === 'window-claimed')).toHaveLength(1);
    expect(events.at(-1)!.kind).toBe('released');
  });

  it('--retries within --max-attempts: the budget stops the retries', async () => {
    const job = `retries-budget-${tag}`;
    const file = path.join(tmp, `${job}.jsonl`);
    const r = await runCli(
      [
        'run',
        ...conn(),
        '--name',
        job,
        '--window',
        'w1',
        '--retries',
        '5',
        '--retry-delay',
        '100ms',
        '--max-attempts',
        '2',
        ...failing(file, 'w1'),
      ],
      noDb,
    );
    expect(r.exitCode, r.all).toBe(3);
    expect(starts(file).map((s) => s.LEASEJOB_ATTEMPT)).toEqual(['1', '2']);
  });

  it('a trigger within the backoff of the last failure skips (exit 0), saying when the next attempt is allowed', async () => {
    const job = `backoff-${tag}`;
    const file = path.join(tmp, `${job}.jsonl`);
    const run = () =>
      runCli(['run', ...conn(), '--name', job, '--window', 'w1', '--retry-delay', '1h', ...failing(file, 'w1')], noDb);
    expect((await run()).exitCode).toBe(3);
    const second = await run();
    expect(second.exitCode, second.all).toBe(0);
    expect(starts(file)).toHaveLength(1);
    const line = logLines(second.stderr).find((l) =>
      String(l.msg).startsWith('last attempt failed within its backoff'),
    );
    expect(line, second.stderr).toBeDefined();
    const events = await history(job);
    const failed = events.find((e) => e.kind === 'window-failed')!;
    const skip = events.find((e) => e.kind === 'backoff-skip')!;
    expect(skip.detail).toMatchObject({ attempts: 1 });
    const nextAt = new Date(String(skip.detail.next_at));
    expect(line!.nextAt).toBe(nextAt.toISOString());
    // The backoff after the first failure is the delay itself, from when that failure was recorded.
    const failedAt = new Date((failed as unknown as { dbTime: string }).dbTime).getTime();
    expect(Math.abs(nextAt.getTime() - failedAt - 3_600_000)).toBeLessThan(1_000);
    const text = await scrapeOnce(conn(), noDb, { timeoutMs: 120_000 });
    expect(metric(text, 'leasejob_attempt_skips_total', `job="${job}",reason="backoff"`)).toBe(1);
  });
});

describe('--retries and the pings', () => {
  it('each try its own start and end ping, then the lease released once (--ping-url)', async () => {
    const rx = await startReceiver();
    try {
      const file = path.join(tmp, 'pings.jsonl');
      const r = await runCli(
        [
          'run',
          '--state-file',
          path.join(tmp, 'pings.db'),
          '--name',
          'pings',
          '--window',
          'w1',
          '--retries',
          '1',
          '--retry-delay',
          '100ms',
          '--ping-url',
          `${rx.url}/ping/abc123`,
          ...failing(file, 'w1'),
        ],
        noDb,
      );
      expect(r.exitCode, r.all).toBe(3);
      expect(starts(file)).toHaveLength(2);
      expect(rx.requests.map((q) => q.path)).toEqual([
        '/ping/abc123/start',
        '/ping/abc123/3',
        '/ping/abc123/start',
        '/ping/abc123/3',
      ]);
    } finally {
      await rx.close();
    }
  });
});

describe('occurrence policies: bad input', () => {
  it.each([
    ['--max-attempts 0', ['--window', 'w', '--max-attempts', '0'], /--max-attempts/],
    ['--retries -1', ['--window', 'w', '--retries', 'x'], /--retries/],
    ['--retry-delay 0s', ['--window', 'w', '--retry-delay', '0s'], /--retry-delay/],
    ['--max-attempts without a window', ['--max-attempts', '2'], /needs a window/],
  ])('%s is refused (exit 64), nothing written', async (_label, flags, message) => {
    const state = path.join(tmp, 'bad.db');
    const r = await runCli(['run', '--state-file', state, '--name', 'bad', ...flags, '--', 'true'], noDb);
    expect(r.exitCode, r.all).toBe(64);
    expect(r.stderr).toMatch(message);
    const h = await runCli(['history', '--state-file', state, '--name', 'bad', '--json'], noDb);
    expect(h.stdout.includes('acquired')).toBe(false);
  });
});
