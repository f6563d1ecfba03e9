// The default budget counts failed attempts only (issue 44, item 2; docs/occurrence.md): after
// two holders of an occurrence crashed (their attempts lost), a `--retries 2` run of a failing
// command still makes its three tries, in both stores. Real CLI processes, a real child; the
// holders are SIGKILLed with their child and their leases released, as an operator would.
import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fixture, runCli, startCli, waitFor } from '../helpers/cli.js';
import { bothStores, NO_DB_ENV } from '../helpers/both-stores.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-budget-lost-');
const { stores } = bothStores('leasejob-budget-lost-state-');
const WINDOW = '2026-03-01T10:00:00Z';

const starts = (file: string): Array<Record<string, string>> =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, string>)
    : [];

describe.each(stores)('the default budget in %s', (store, conn) => {
  const tag = store === 'PostgreSQL' ? 'pg' : 'lite';
  const runArgs = (job: string, file: string, extra: string[], mode: string): string[] => [
    'run',
    ...conn(),
    '--name',
    job,
    '--schedule',
    '0 10 * * *',
    '--window-from-schedule',
    '--scheduled-time',
    WINDOW,
    ...extra,
    '--',
    process.execPath,
    fixture('append-env.mjs'),
    file,
    mode,
  ];

  /** A holder of the occurrence SIGKILLed while its child runs, then its lease released: a lost attempt. */
  async function crashHolder(job: string, file: string): Promise<void> {
    const blocked = `${file}.blocked`;
    rmSync(blocked, { force: true });
    const p = startCli(runArgs(job, file, ['--ttl', '60s'], `block=${WINDOW}`), NO_DB_ENV, { timeoutMs: 120_000 });
    let ended = false;
    void p.then(() => (ended = true));
    await waitFor('the blocked child to start', () => existsSync(blocked) || ended, 60_000);
    expect(existsSync(blocked), 'the holder started its child').toBe(true);
    p.kill('SIGKILL');
    await p;
    const rel = await runCli(['release', ...conn(), '--name', job, '--force'], NO_DB_ENV);
    expect(rel.exitCode, rel.all).toBe(0);
  }

  it('two crashed holders do not spend --retries 2: the failing run still tries three times', async () => {
    const job = `budget-lost-${tag}`;
    const file = path.join(tmp, `${job}.jsonl`);
    await crashHolder(job, file);
    await crashHolder(job, file);
    expect(starts(file).map((s) => s.LEASEJOB_ATTEMPT)).toEqual(['1', '2']);

    const r = await runCli(
      runArgs(job, file, ['--retries', '2', '--retry-delay', '1ms'], `fail=3=${WINDOW}`),
      NO_DB_ENV,
      { timeoutMs: 120_000 },
    );
    expect(r.exitCode, r.all).toBe(3);
    expect(starts(file).map((s) => s.LEASEJOB_ATTEMPT)).toEqual(['1', '2', '3', '4', '5']);

    // Three failed attempts spent the run's budget: a later trigger skips the occurrence.
    const again = await runCli(
      runArgs(job, file, ['--retries', '2', '--retry-delay', '1ms'], `fail=3=${WINDOW}`),
      NO_DB_ENV,
    );
    expect(again.exitCode, again.all).toBe(0);
    expect(starts(file)).toHaveLength(5);
  }, 300_000);

  it('failed attempts still spend it: --retries 1 after one failure tries once more, then a trigger skips', async () => {
    const job = `budget-failed-${tag}`;
    const file = path.join(tmp, `${job}.jsonl`);
    const first = await runCli(runArgs(job, file, [], `fail=3=${WINDOW}`), NO_DB_ENV);
    expect(first.exitCode, first.all).toBe(3);
    // --retries 1 allows two failed attempts: one more, then that run's budget is spent too.
    const second = await runCli(
      runArgs(job, file, ['--retries', '1', '--retry-delay', '1ms'], `fail=3=${WINDOW}`),
      NO_DB_ENV,
    );
    expect(second.exitCode, second.all).toBe(3);
    expect(starts(file).map((s) => s.LEASEJOB_ATTEMPT)).toEqual(['1', '2']);
    const third = await runCli(runArgs(job, file, [], `fail=3=${WINDOW}`), NO_DB_ENV);
    expect(third.exitCode, third.all).toBe(0);
    expect(starts(file)).toHaveLength(2);
  }, 300_000);
});
