// The same crontab line on two hosts, against one PostgreSQL, cron's timing given as
// --scheduled-time: a failing occurrence runs (and mails) once, not once per host; --retries 1
// runs it twice; a crashed holder's occurrence is still resumed by the next trigger; and a
// Kubernetes Job's own retry (a new pod, the occurrence from its name) still reruns a failure.
import { readFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { bothStores, NO_DB_ENV } from '../helpers/both-stores.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-crontab-trial-');
const { stores } = bothStores('leasejob-crontab-trial-state-');

/** Today's 00:05 UTC: a tick of the crontab's '5 0 * * *' that is due. */
const TICK = (() => {
  const d = new Date();
  d.setUTCHours(0, 5, 0, 0);
  return d.toISOString();
})();
const host = (name: string) => ({ ...NO_DB_ENV, LEASEJOB_NODE_NAME: name });
/** A command that notes each start in `file`, then exits `code`. */
const noteThenExit = (file: string, code: number): string[] => ['sh', '-c', `echo run >> '${file}'; exit ${code}`];
const starts = (file: string): number =>
  existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).length : 0;

describe.each(stores)('one crontab line on two hosts (%s)', (kind, conn) => {
  /** The crontab line (at --log-level warn, as the README's), with cron's tick given. */
  const line = (job: string, extra: string[], command: string[]): string[] => [
  'run', ...conn(), '--log-level', 'warn', '--name', job,
  '--schedule', '5 0 * * *', '--window-from-schedule', '--scheduled-time', TICK, ...extra, '--', ...command,
]; // prettier-ignore
  it('a failing occurrence runs once and mails once: the second host skips it silently', async () => {
    const file = path.join(tmp, kind + '-fail.starts');
    const a = await runCli(line('fail-once', [], noteThenExit(file, 3)), host('host-a'));
    expect(a.exitCode, a.all).toBe(3);
    // What cron mails from host A: the failure, once.
    expect(logLines(a.stderr).map((l) => l.msg)).toContainEqual(
      expect.stringMatching(/^window failed: once per occurrence/),
    );
    const b = await runCli(line('fail-once', [], noteThenExit(file, 3)), host('host-b'));
    expect(b.exitCode, b.all).toBe(0);
    expect(b.stderr).toBe(''); // nothing for cron to mail
    expect(starts(file)).toBe(1);
    // On a terminal it says why (at info).
    const c = await runCli(
      [...line('fail-once', [], noteThenExit(file, 3)).filter((x) => x !== 'warn' && x !== '--log-level')],
      host('host-b'),
    );
    expect(c.exitCode, c.all).toBe(0);
    expect(logLines(c.stderr).map((l) => l.msg)).toContainEqual(
      expect.stringMatching(/^occurrence already failed \(once per occurrence/),
    );
    expect(starts(file)).toBe(1);
    // check still says it failed; run --rerun runs it again, by hand.
    expect((await runCli(['check', ...conn(), '--name', 'fail-once'], NO_DB_ENV)).exitCode).toBeGreaterThan(0);
    const rerun = await runCli(line('fail-once', ['--rerun'], noteThenExit(file, 0)), host('host-a'));
    expect(rerun.exitCode, rerun.all).toBe(0);
    expect(starts(file)).toBe(2);
  });

  it("with --retries 1 it runs twice (the run's own retry), and the second host still skips", async () => {
    const file = path.join(tmp, kind + '-retry.starts');
    const retry = ['--retries', '1', '--retry-delay', '200ms'];
    const a = await runCli(line('fail-retry', retry, noteThenExit(file, 3)), host('host-a'));
    expect(a.exitCode, a.all).toBe(3);
    const b = await runCli(line('fail-retry', retry, noteThenExit(file, 3)), host('host-b'));
    expect(b.exitCode, b.all).toBe(0);
    expect(b.stderr).toBe('');
    expect(starts(file)).toBe(2);
  });

  it('--max-attempts keeps its own meaning: --max-attempts 2 lets the second host try again', async () => {
    const file = path.join(tmp, kind + '-max.starts');
    expect(
      (await runCli(line('fail-max', ['--max-attempts', '2'], noteThenExit(file, 3)), host('host-a'))).exitCode,
    ).toBe(3);
    expect(
      (await runCli(line('fail-max', ['--max-attempts', '2'], noteThenExit(file, 3)), host('host-b'))).exitCode,
    ).toBe(3);
    expect(
      (await runCli(line('fail-max', ['--max-attempts', '2'], noteThenExit(file, 3)), host('host-a'))).exitCode,
    ).toBe(0);
    expect(starts(file)).toBe(2);
  });

  it('an occurrence whose holder crashed is resumed by the next trigger', async () => {
    const pidFile = path.join(tmp, kind + '-crash.pid');
    const file = path.join(tmp, kind + '-crash.starts');
    const a = startCli(
      line('crash', ['--ttl', '2s'], [process.execPath, fixture('forever.mjs'), pidFile]),
      host('host-a'),
    );
    await waitFor("the holder's child to start", () => existsSync(pidFile));
    a.kill('SIGKILL');
    await a;
    // Host B's trigger waits out the dead holder's lease, then runs the occurrence as attempt 2.
    const b = await runCli(
      line(
        'crash',
        ['--on-busy', 'wait', '--wait-timeout', '60s'],
        ['sh', '-c', `echo "$LEASEJOB_ATTEMPT" >> '${file}'`],
      ),
      host('host-b'),
    );
    expect(b.exitCode, b.all).toBe(0);
    expect(readFileSync(file, 'utf8')).toBe('2\n'); // resumed as attempt 2
  });
});

// Kubernetes implies the shared store: PostgreSQL only.
describe('a Kubernetes Job (PostgreSQL)', () => {
  const [kind, conn] = stores[0]!;
  const line = (job: string, extra: string[], command: string[]): string[] => [
    'run', ...conn(), '--log-level', 'warn', '--name', job,
    '--schedule', '5 0 * * *', '--window-from-schedule', '--scheduled-time', TICK, ...extra, '--', ...command,
  ]; // prettier-ignore
  it("a Kubernetes Job's retry (a new pod of the same Job) still reruns a failure: its backoffLimit is the budget", async () => {
    const file = path.join(tmp, kind + '-k8s.starts');
    const minutes = Math.floor(Date.parse(TICK) / 60_000);
    const pod = { ...host('node-a'), KUBERNETES_SERVICE_HOST: '10.0.0.1', JOB_NAME: `k8s-job-${minutes}` };
    const args = line('k8s-job', [], noteThenExit(file, 3)).filter(
      (x, i, all) => x !== '--scheduled-time' && all[i - 1] !== '--scheduled-time',
    );
    expect((await runCli(args, pod)).exitCode).toBe(3);
    expect((await runCli(args, pod)).exitCode).toBe(3);
    expect(starts(file)).toBe(2);
  });
});
