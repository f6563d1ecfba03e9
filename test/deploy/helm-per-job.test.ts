// The chart job by job (issue 47): per-job inject modes and copy sizes, the exporter's
// NetworkPolicy, the release's own ServiceAccount, numbers written as strings, and a
// `leaseName` that lets a CronJob share the lease of a crontab job named `nightly close`: the
// rendered container's own arguments, run against the same database as a crontab-style run.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { logLines, runCli } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { CHART_DIR, DATABASE_SET, findTool, parseDocuments, podSpecOf, type K8sObject } from './deploy-files.js';
import { schemaErrors, unknownFields } from './k8s-fields.js';

const helm = findTool('helm', 'LEASEJOB_HELM');
if (!helm) console.log('skipping the per-job chart tests: no helm on PATH (set LEASEJOB_HELM to use one)');

/** `helm template` of these values (as a file) for a Kubernetes version; the result, not checked. */
function template(values: unknown, kube = '1.35.0'): { status: number | null; stdout: string; stderr: string } {
  const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-helm-job-'));
  try {
    const file = path.join(dir, 'values.yaml');
    writeFileSync(file, JSON.stringify(values));
    const args = ['template', 'rel', CHART_DIR, '--namespace', 'jobs', '--set', DATABASE_SET, '-f', file, '--kube-version', kube];
    return spawnSync(helm!, args, { encoding: 'utf8', timeout: 60_000 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function render(values: unknown, kube?: string): K8sObject[] {
  const r = template(values, kube);
  expect(r.status, r.stderr).toBe(0);
  return parseDocuments(r.stdout, 'helm template') as K8sObject[];
}

const cronPod = (objects: K8sObject[], job: string) =>
  podSpecOf(objects.find((o) => o.kind === 'CronJob' && o.metadata.name === `rel-leasejob-${job}`)!);

describe.skipIf(!helm)('the chart, job by job', () => {
  it('per-job inject modes and copy sizes, a NetworkPolicy and a ServiceAccount: valid Kubernetes objects', async () => {
    const objects = render({
      inject: { mode: 'copy', sizeLimit: '160Mi' },
      networkPolicy: { enabled: true, namespaces: ['monitoring'], from: [{ podSelector: { matchLabels: { app: 'grafana' } } }] },
      jobs: [
        { name: 'alpine-job', schedule: '@hourly', command: ['true'], image: { repository: 'alpine', tag: '3.20' } },
        { name: 'distroless-job', schedule: '@daily', command: ['/app/run'], image: { repository: 'gcr.io/distroless/static' },
          inject: { mode: 'imageVolume' } },
        { name: 'big-copy', schedule: '@daily', command: ['true'],
          inject: { sizeLimit: '300Mi', resources: { requests: { cpu: '100m', memory: '300Mi' }, limits: { memory: '400Mi' } } } },
      ],
    }); // prettier-ignore
    for (const o of objects.filter((x) => !['ServiceMonitor', 'PrometheusRule'].includes(x.kind))) {
      expect(await schemaErrors(o), `${o.kind} ${o.metadata.name}`).toEqual([]);
      expect(unknownFields(o), `${o.kind} ${o.metadata.name}`).toEqual([]);
    }
    // The chart-wide copy for one job, an image volume for the other, its own size for the third.
    const alpine = cronPod(objects, 'alpine-job');
    expect(alpine.initContainers[0].name).toBe('leasejob-inject');
    expect(alpine.volumes).toContainEqual({ name: 'leasejob', emptyDir: { sizeLimit: '160Mi' } });
    const distroless = cronPod(objects, 'distroless-job');
    expect(distroless.initContainers).toBeUndefined();
    expect(distroless.volumes).toContainEqual({ name: 'leasejob', image: { reference: 'leasejob:0.1.0', pullPolicy: 'IfNotPresent' } });
    const big = cronPod(objects, 'big-copy');
    expect(big.volumes).toContainEqual({ name: 'leasejob', emptyDir: { sizeLimit: '300Mi' } });
    expect(big.initContainers[0].resources.requests.memory).toBe('300Mi');
    // A job's inject.enabled=false beats the chart-wide true (no merge letting true win).
    const off = render({ jobs: [{ name: 'own', schedule: '@daily', command: ['true'], inject: { enabled: false } }] });
    expect(cronPod(off, 'own').initContainers).toBeUndefined();
    expect(cronPod(off, 'own').containers[0].command).toEqual(['tini', '--', 'leasejob']);

    // The exporter reached only from the namespaces and pods named.
    const policy = objects.find((o) => o.kind === 'NetworkPolicy') as K8sObject & { spec: any };
    expect(policy.metadata.name).toBe('rel-leasejob-exporter');
    expect(policy.spec.podSelector.matchLabels['app.kubernetes.io/component']).toBe('exporter');
    expect(policy.spec.ingress).toEqual([
      {
        from: [
          { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } },
          { podSelector: { matchLabels: { app: 'grafana' } } },
        ],
        ports: [{ port: 9464, protocol: 'TCP' }],
      },
    ]);
    // Enabled with nobody named: nothing gets in.
    const closed = render({ networkPolicy: { enabled: true } }).find((o) => o.kind === 'NetworkPolicy') as K8sObject & { spec: any };
    expect(closed.spec.ingress).toEqual([]);
    expect(render({}).some((o) => o.kind === 'NetworkPolicy')).toBe(false);

    // The release's own ServiceAccount, without a token, for every pod; or one you name.
    const account = objects.find((o) => o.kind === 'ServiceAccount') as K8sObject & { automountServiceAccountToken?: boolean };
    expect(account.metadata.name).toBe('rel-leasejob');
    expect(account.automountServiceAccountToken).toBe(false);
    for (const o of objects.filter((x) => ['CronJob', 'Deployment', 'Job'].includes(x.kind)))
      expect(podSpecOf(o).serviceAccountName, `${o.kind} ${o.metadata.name}`).toBe('rel-leasejob');
    for (const named of [{ serviceAccount: { create: false, name: 'batch' } }, { serviceAccountName: 'batch' }]) {
      const own = render(named);
      expect(own.some((o) => o.kind === 'ServiceAccount')).toBe(false);
      expect(podSpecOf(own.find((o) => o.kind === 'Deployment')!).serviceAccountName).toBe('batch');
    }
  });

  it('numbers written as strings are read; a word is refused saying what to write', async () => {
    const quoted = render({
      jobs: [{ name: 'q', schedule: '@daily', command: ['true'], maxAttempts: '3', retries: '1', backoffLimit: '2',
        terminationGracePeriodSeconds: '60', activeDeadlineSeconds: '0' }],
    }); // prettier-ignore
    const cron = quoted.find((o) => o.metadata.name === 'rel-leasejob-q') as K8sObject & { spec: any };
    const args = podSpecOf(cron).containers[0].args as string[];
    expect(args.slice(args.indexOf('--max-attempts'), args.indexOf('--max-attempts') + 2)).toEqual(['--max-attempts', '3']);
    expect(args.slice(args.indexOf('--retries'), args.indexOf('--retries') + 2)).toEqual(['--retries', '1']);
    expect(cron.spec.jobTemplate.spec.backoffLimit).toBe(2);
    expect(cron.spec.jobTemplate.spec.activeDeadlineSeconds).toBeUndefined();
    expect(podSpecOf(cron).terminationGracePeriodSeconds).toBe(60);
    // The chart's other counts too, each rendered as the number the Kubernetes types want.
    const others = render({
      exporter: { port: '9500', replicas: '2', service: { port: '9500' } }, prune: { batchSize: '500', backoffLimit: '1' },
      migration: { backoffLimit: '2', activeDeadlineSeconds: '120', ttlSecondsAfterFinished: '0' }, networkPolicy: { enabled: true },
    }); // prettier-ignore
    for (const o of others.filter((x) => !['ServiceMonitor', 'PrometheusRule'].includes(x.kind)))
      expect(await schemaErrors(o), `${o.kind} ${o.metadata.name}`).toEqual([]);
    const deployment = others.find((o) => o.kind === 'Deployment') as K8sObject & { spec: any };
    expect(deployment.spec.replicas).toBe(2);
    expect(podSpecOf(deployment).containers[0].ports[0].containerPort).toBe(9500);
    const migrate = others.find((o) => o.kind === 'Job') as K8sObject & { spec: any };
    expect([migrate.spec.backoffLimit, migrate.spec.activeDeadlineSeconds, migrate.spec.ttlSecondsAfterFinished]).toEqual([2, 120, undefined]);
    const word = template({ jobs: [{ name: 'q', schedule: '@daily', command: ['true'], maxAttempts: 'three' }] });
    expect(word.status).not.toBe(0);
    expect(word.stderr).toContain("at '/jobs/0/maxAttempts'");
    expect(word.stderr).toContain('a whole number from 1 to 1000, written maxAttempts: 3');
    const range = template({ jobs: [{ name: 'q', schedule: '@daily', command: ['true'], maxAttempts: '1001' }] });
    expect(range.stderr).toContain('a whole number from 1 to 1000');
    expect(template({ exporter: { port: '99999' } }).stderr).toContain('a whole number from 1 to 65535, written port: 9464');
  });

  it('refuses two jobs on one lease name, and a lease name run would refuse', () => {
    const job = (name: string, leaseName?: string) => ({ name, leaseName, schedule: '@daily', command: ['true'] });
    const twice = template({ jobs: [job('a', 'nightly close'), job('b', 'nightly close')] });
    expect(twice.stderr).toContain('the lease name "nightly close" appears twice');
    // A leaseName equal to another job's name is the same lease too.
    expect(template({ jobs: [job('a'), job('b', 'a')] }).stderr).toContain('the lease name "a" appears twice');
    expect(template({ jobs: [job('a', ' padded')] }).stderr).toContain("at '/jobs/0/leaseName'");
  });

  it('NOTES.txt shows how to open the status page, and each job\'s lease', () => {
    const notes = readFileSync(path.join(CHART_DIR, 'templates', 'NOTES.txt'), 'utf8');
    expect(notes).toContain('then open http://localhost:{{ .Values.exporter.service.port }}/ in a browser');
    expect(notes).toContain('lease {{ get . "leaseName" | default .name | quote }}');
  });
});

describe.skipIf(!helm)('a crontab job and a CronJob share one lease through leaseName', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await testDb();
  });
  afterAll(async () => {
    await db.close();
  });

  it('`nightly close` from a crontab, then the rendered CronJob container for the same occurrence: one lease, one run', async () => {
    const tick = new Date();
    tick.setUTCHours(0, 5, 0, 0);
    if (tick.getTime() > Date.now()) tick.setUTCDate(tick.getUTCDate() - 1);
    const objects = render({
      database: { schema: db.schema },
      jobs: [{ name: 'nightly-close', leaseName: 'nightly close', schedule: '5 0 * * *', command: ['sh', '-c', 'echo cronjob-ran'] }],
    });
    const cron = objects.find((o) => o.metadata.name === 'rel-leasejob-nightly-close')!;
    expect(cron.metadata.annotations?.['leasejob/lease-name']).toBe('nightly close');
    const args = podSpecOf(cron).containers[0].args as string[];
    expect(args.slice(0, 3)).toEqual(['run', '--name', 'nightly close']);
    const env = { LEASEJOB_DATABASE_URL: db.url, DATABASE_URL: undefined, LEASEJOB_STATE_FILE: undefined };

    // The crontab line, on a host: the occurrence from cron's clock.
    const crontab = await runCli(
      ['run', '--schema', db.schema, '--name', 'nightly close', '--schedule', '5 0 * * *', '--window-from-schedule',
        '--scheduled-time', tick.toISOString(), '--', 'sh', '-c', 'echo crontab-ran'], { ...env, JOB_NAME: undefined, KUBERNETES_SERVICE_HOST: undefined }); // prettier-ignore
    expect(crontab.exitCode, crontab.all).toBe(0);
    expect(crontab.stdout.trim()).toBe('crontab-ran');
    // A crontab host hears once, at info, which chart setting keeps this lease on Kubernetes.
    const note = logLines(crontab.stderr).filter((l) => String(l.msg).startsWith('job name is not a Kubernetes name'));
    expect(note).toHaveLength(1);
    expect(note[0]).toMatchObject({ level: 'info', job: 'nightly close', chartName: 'nightly-close' });

    // The CronJob's container, as the controller starts it: its Job named <cronjob>-<unix minutes>.
    const jobName = `rel-leasejob-nightly-close-${Math.floor(tick.getTime() / 60_000)}`;
    const pod = await runCli(args, { ...env, JOB_NAME: jobName, KUBERNETES_SERVICE_HOST: '10.0.0.1' });
    expect(pod.exitCode, pod.all).toBe(0);
    expect(pod.stdout).toBe(''); // the occurrence was done: not run again
    expect(logLines(pod.stderr).map((l) => l.msg)).toContain('window already completed');
    expect(logLines(pod.stderr).some((l) => String(l.msg).startsWith('job name is not a Kubernetes name'))).toBe(false);

    const leases = await db.rows<{ name: string }>(`SELECT name FROM ${db.schema}.leases`);
    expect(leases).toEqual([{ name: 'nightly close' }]);
    const windows = await db.rows<{ job: string; outcome: string }>(`SELECT job, outcome FROM ${db.schema}.windows`);
    expect(windows).toEqual([{ job: 'nightly close', outcome: 'completed' }]);
  });
});
