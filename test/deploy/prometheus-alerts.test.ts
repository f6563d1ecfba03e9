// The chart's alert rules evaluated by a real Prometheus server scraping a real `leasejob
// exporter`, after real `leasejob run`s: which alerts go pending or firing, for which job, and
// that one cause is one alert (a stopped job pages once; a failed run pages at once, and not
// again when its grace ends; a run outside --expect-duration), and that a database outage
// neither resolves nor re-pages them. promtool's unit tests (prometheus-rules.test.ts) prove each
// expression on made-up series; this proves the exporter's series and the rules agree.
// Skipped, with the reason printed, without a `prometheus` binary (Debian: apt-get install
// --no-install-recommends prometheus) or helm. Nothing here is timed: every wait polls
// Prometheus's /api/v1 for a condition, with limits a busy 2-core machine does not reach.
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, runCli, startExporter, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { startReceiver, type Receiver } from '../helpers/http-receiver.js';
import { startProxy, type Proxy } from '../helpers/proxy.mjs';
import { tempDirs } from '../helpers/temp.js';
import { findTool, renderRuleSpec } from './deploy-files.js';

const helm = findTool('helm', 'LEASEJOB_HELM');
const prometheus = findTool('prometheus', 'LEASEJOB_PROMETHEUS', ['--version']);
if (!helm) console.log('skipping the alerts under a real Prometheus: no helm on PATH (set LEASEJOB_HELM to use one)');
if (!prometheus)
  console.log('skipping the alerts under a real Prometheus: no prometheus on PATH (apt-get install --no-install-recommends prometheus, or set LEASEJOB_PROMETHEUS)');

const NAMESPACE = 'billing';
const RELEASE = 'rel';
/** Generous: Prometheus, PostgreSQL, the exporter and other test files share two cores. */
const WAIT_MS = 180_000;

interface Alert { labels: Record<string, string>; state: 'pending' | 'firing' | 'inactive'; activeAt: string }
/** One alert as Prometheus sends it to Alertmanager (POST /api/v2/alerts), and when it came. */
interface Sent { labels: Record<string, string>; startsAt: string; endsAt: string; receivedAt: number }
/**
 * A firing alert is sent with endsAt 4 resend delays (5 s here) after its evaluation, a resolved
 * one with endsAt its resolution: one whose endsAt has passed when it arrives is a "resolved".
 */
const isResolved = (a: Sent): boolean => Date.parse(a.endsAt) <= a.receivedAt;

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Today's 00:00 UTC plus `days`, as --scheduled-time takes it. */
function midnight(days: number): string {
  const d = new Date();
  d.setUTCHours(0, 0, 0, 0);
  return new Date(d.getTime() + days * 86_400_000).toISOString();
}

describe.skipIf(!helm || !prometheus)('the chart\'s alerts under a real Prometheus', () => {
  let db: TestDb;
  let exporter: Awaited<ReturnType<typeof startExporter>> | undefined;
  /** Between the exporter and the database: cut to take the database away from it. */
  let proxy: Proxy | undefined;
  /** Alertmanager's stand-in: every notification Prometheus sends. */
  let alertmanager: Receiver | undefined;
  let server: ChildProcess | undefined;
  let api: string;
  let serverLog = '';
  const newDir = tempDirs('leasejob-prom-');
  const conn = (): string[] => ['--database-url', db.url, '--schema', db.schema];
  const env = { JOB_NAME: undefined, DATABASE_URL: undefined, LEASEJOB_DATABASE_URL: undefined };
  const exit = (code: number): string[] => ['--', process.execPath, fixture('exit-with.mjs'), String(code)];
  const daily = (name: string, days: number, extra: string[] = []): string[] =>
    ['run', ...conn(), '--name', name, '--schedule', '0 0 * * *', '--window-from-schedule', '--scheduled-time', midnight(days), ...extra];

  async function alerts(): Promise<Alert[]> {
    const body = (await (await fetch(`${api}/api/v1/alerts`)).json()) as { data: { alerts: Alert[] } };
    return body.data.alerts;
  }
  /** The alerts, pending or firing, as `state alertname job` lines, sorted. */
  const summary = (list: Alert[]): string[] => list.map((a) => `${a.state} ${a.labels.alertname} ${a.labels.job ?? ''}`).sort();
  async function evaluations(): Promise<number> {
    const body = (await (await fetch(`${api}/api/v1/rules`)).json()) as { data: { groups: Array<{ lastEvaluation: string }> } };
    return Math.max(...body.data.groups.map((g) => Date.parse(g.lastEvaluation)));
  }

  beforeAll(async () => {
    db = await testDb();
    const dir = newDir();
    proxy = await startProxy(db.url);
    exporter = await startExporter(['--database-url', proxy.url(db.url), '--schema', db.schema], env, { timeoutMs: 600_000 });
    alertmanager = await startReceiver();
    const rules = path.join(dir, 'rules.yaml');
    // The chart's defaults, but for one `for` that keeps the duration alerts pending (the test
    // sees both states; every other alert has `for: 0m` and fires at its first evaluation).
    const set = ['prometheusRule.durationUnexpected.for=1h'];
    writeFileSync(rules, stringify(renderRuleSpec(helm!, { release: RELEASE, namespace: NAMESPACE, set })));
    const config = path.join(dir, 'prometheus.yaml');
    writeFileSync(config, stringify({
      global: { scrape_interval: '1s', evaluation_interval: '1s' },
      rule_files: [rules],
      alerting: { alertmanagers: [{ api_version: 'v2', static_configs: [{ targets: [new URL(alertmanager.url).host] }] }] },
      scrape_configs: [{
        job_name: 'leasejob-exporter',
        // The exporter's own `job` label is the leasejob job (the chart's ServiceMonitor sets honorLabels).
        honor_labels: true,
        // What prometheus-operator adds from the Service, which the rules select on.
        static_configs: [{ targets: [`127.0.0.1:${exporter.port}`], labels: { namespace: NAMESPACE, service: `${RELEASE}-leasejob-exporter` } }],
      }],
    }));
    const port = await freePort();
    api = `http://127.0.0.1:${port}`;
    server = spawn(prometheus!, [`--config.file=${config}`, `--storage.tsdb.path=${path.join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn', '--rules.alert.resend-delay=5s'], { stdio: ['ignore', 'ignore', 'pipe'] });
    server.stderr!.on('data', (d: Buffer) => (serverLog += d.toString()));
    await waitFor('prometheus to answer', async () => {
      if (server!.exitCode !== null) throw new Error(`prometheus exited ${server!.exitCode}: ${serverLog}`);
      return (await fetch(`${api}/-/ready`).catch(() => undefined))?.ok;
    }, WAIT_MS, 200);
  }, WAIT_MS + 60_000);

  afterAll(async () => {
    if (server && server.exitCode === null) {
      const ended = new Promise((resolve) => server!.once('exit', resolve));
      server.kill('SIGTERM');
      await ended;
    }
    await exporter?.stop();
    await proxy?.close();
    await alertmanager?.close();
    await db?.close();
  });

  it('pages once per cause: a failed first run and a failed run at once, a stopped job once, a run too short or too long; a healthy job not at all', async () => {
    // A new job whose first run (given its scheduled time, today's) fails: judged like any other.
    expect((await runCli(daily('first-fail', 0, exit(2)), env)).exitCode).toBe(2);
    // A job that completed yesterday and failed today.
    expect((await runCli(daily('failed', -1, exit(0)), env)).exitCode).toBe(0);
    expect((await runCli(daily('failed', 0, exit(3)), env)).exitCode).toBe(3);
    // Healthy: today's occurrence completed.
    expect((await runCli(daily('healthy', 0, exit(0)), env)).exitCode).toBe(0);
    // Stopped: a minutely job that completed one occurrence 3 minutes ago and none since. It was
    // registered an hour ago (moved back here: the ticks before a job's registration are not
    // expected of it), so every minute since is a due occurrence not completed.
    const minute = new Date(Math.floor(Date.now() / 60_000) * 60_000 - 3 * 60_000).toISOString();
    const stopped = ['run', ...conn(), '--name', 'stopped', '--schedule', '* * * * *', '--alert-after', '5s',
      '--window-from-schedule', '--scheduled-time', minute, ...exit(0)];
    expect((await runCli(stopped, env)).exitCode).toBe(0);
    await db.rows(`UPDATE ${db.schema}.jobs SET created_at = created_at - interval '1 hour' WHERE name = 'stopped'`);
    // Too short (did it do its work?) and too long for --expect-duration; both completed.
    const sleepThen = (ms: number): string[] => ['--', process.execPath, fixture('sleep-then.mjs'), String(ms), '0'];
    expect((await runCli(daily('too-short', 0, ['--expect-duration', '5s..1h', ...sleepThen(0)]), env)).exitCode).toBe(0);
    expect((await runCli(daily('too-long', 0, ['--expect-duration', '..200ms', ...sleepThen(700)]), env)).exitCode).toBe(0);

    const expected = [
      'firing LeasejobDueOccurrencesNotCompleted stopped',
      'firing LeasejobRunFailed failed',
      'firing LeasejobRunFailed first-fail',
      'pending LeasejobDurationUnexpected too-long',
      'pending LeasejobDurationUnexpected too-short',
    ];
    const leasejobAlerts = async (): Promise<Alert[]> => (await alerts()).filter((a) => a.labels.job !== undefined);
    await waitFor('the three alerts to fire and two to be pending', async () => summary(await leasejobAlerts()).join('\n') === expected.join('\n'), WAIT_MS, 500)
      .catch(async (e: Error) => {
        throw new Error(`${e.message}; alerts now: ${summary(await alerts()).join(', ')}`);
      });
    // And nothing else comes: three more evaluations later, still exactly these (the stopped job
    // one alert, however many occurrences it misses; the failed ones not paged again).
    const seen = await evaluations();
    await waitFor('three more evaluations', async () => (await evaluations()) >= seen + 3_000, WAIT_MS, 500);
    expect(summary(await leasejobAlerts())).toEqual(expected);
    const stoppedAlerts = (await alerts()).filter((a) => a.labels.job === 'stopped');
    expect(stoppedAlerts).toHaveLength(1);
    expect(stoppedAlerts[0]!.labels).toMatchObject({ namespace: NAMESPACE, severity: 'critical' });
  }, 2 * WAIT_MS + 120_000);

  it('a database outage longer than the rules\' `for` resolves nothing and pages nothing anew: the same alerts, the same activeAt, no "resolved"', async () => {
    const jobAlerts = async (): Promise<Alert[]> => (await alerts()).filter((a) => a.labels.job !== undefined);
    const key = (a: { labels: Record<string, string> }): string => `${a.labels.alertname} ${a.labels.job}`;
    const sent = (from: number, to = Infinity): Sent[] =>
      alertmanager!.requests.slice(from, to).flatMap((r) =>
        (JSON.parse(r.text ?? '[]') as Omit<Sent, 'receivedAt'>[]).map((a) => ({ ...a, receivedAt: r.receivedAt })))
        .filter((a) => a.labels.job !== undefined);
    async function upIs(value: number): Promise<boolean> {
      const q = await (await fetch(`${api}/api/v1/query?query=leasejob_up`)).json() as { data: { result: Array<{ value: [number, string] }> } };
      return q.data.result.length === 1 && q.data.result[0]!.value[1] === String(value);
    }
    const before = await jobAlerts();
    expect(summary(before)).toHaveLength(5); // the first test's: three firing, two pending
    const activeAt = new Map(before.map((a) => [key(a), a.activeAt]));
    // Every firing alert notified before the outage.
    await waitFor('a notification for each firing alert', () => {
      const keys = new Set(sent(0).filter((a) => !isResolved(a)).map(key));
      return before.filter((a) => a.state === 'firing').every((a) => keys.has(key(a)));
    }, WAIT_MS, 500);
    const outageFrom = alertmanager!.requests.length;

    proxy!.cut('reset');
    await waitFor('Prometheus to see leasejob_up 0', () => upIs(0), WAIT_MS, 500);
    // Longer than the `for` of every per-job rule (0m but the duration rule's 1h, pending) and
    // than several notification rounds: 15 evaluations after the exporter lost the database.
    const cutSeen = await evaluations();
    await waitFor('15 evaluations during the outage', async () => {
      // Each look meanwhile: the same alerts in the same states, the per-job series still there.
      expect(summary(await jobAlerts())).toEqual(summary(before));
      return (await evaluations()) >= cutSeen + 15_000;
    }, WAIT_MS, 500);
    const failed = await (await fetch(`${api}/api/v1/query?query=leasejob_failed_occurrences{job="failed"}`)).json() as { data: { result: Array<{ value: [number, string] }> } };
    expect(failed.data.result.map((r) => r.value[1])).toEqual(['1']);
    expect(await upIs(0)).toBe(true);
    const afterFrom = alertmanager!.requests.length;

    proxy!.heal();
    await waitFor('Prometheus to see leasejob_up 1 again', () => upIs(1), WAIT_MS, 500);
    const healSeen = await evaluations();
    await waitFor('10 evaluations after the outage', async () => (await evaluations()) >= healSeen + 10_000, WAIT_MS, 500);
    const after = await jobAlerts();
    expect(summary(after)).toEqual(summary(before));
    for (const a of after) expect(a.activeAt, key(a)).toBe(activeAt.get(key(a)));

    // Per alert: notifications before, during and after; one page (one startsAt) and no resolve.
    const phases = { before: sent(0, outageFrom), during: sent(outageFrom, afterFrom), after: sent(afterFrom) };
    for (const a of before.filter((x) => x.state === 'firing')) {
      const counts = Object.fromEntries(Object.entries(phases).map(([phase, list]) => [phase, list.filter((s) => key(s) === key(a)).length]));
      console.log(`notifications for ${key(a)}: ${JSON.stringify(counts)}`);
      const all = Object.values(phases).flat().filter((s) => key(s) === key(a));
      expect(new Set(all.map((s) => s.startsAt)).size, key(a)).toBe(1);
      expect(all.filter(isResolved), key(a)).toEqual([]);
      expect(counts.during, key(a)).toBeGreaterThan(0); // still firing, and said so, while the database was away
    }
    // The pending ones were never sent at all.
    expect(Object.values(phases).flat().filter((s) => s.labels.alertname === 'LeasejobDurationUnexpected')).toEqual([]);
  }, 3 * WAIT_MS + 120_000);
});
