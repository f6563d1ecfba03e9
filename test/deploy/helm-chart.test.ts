// helm/leasejob without a helm binary: values.yaml against values.schema.json, every values path
// the templates read exists (and every value is read), and the plain manifests in
// deploy/kubernetes say what the chart says. With a helm binary (PATH or LEASEJOB_HELM), the
// chart is also linted and rendered, and the render must equal the plain manifests.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Ajv } from 'ajv';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDuration } from '../../src/schedule/duration.js';
import { ROOT, runCli } from '../helpers/cli.js';
import { newSchemaName, testDb, type TestDb } from '../helpers/db.js';
import {
  CHART_DIR, DATABASE_SET, EXAMPLE_DATABASE_URL, PLAIN_RELEASE, RUN_FLAGS, allStrings, chartTemplate, chartTemplates, chartValues, expectedRunArgs, findTool, installValues,
  fullname, mergedJob, parseDocuments, plainObject, plainObjects, podSpecOf, readYaml, withoutHelmMetadata, type K8sObject, type Values,
} from './deploy-files.js';
import { schemaErrors, unknownFields } from './k8s-fields.js';
import { pathExists, valuesRefs } from './template-refs.js';

/** values.yaml with the database URL an install must give (the chart refuses to render without one). */
const values = installValues();
const schema = JSON.parse(readFileSync(path.join(CHART_DIR, 'values.schema.json'), 'utf8')) as Record<string, any>;
const ajv = new Ajv({ allErrors: true, strict: true });
const validateValues = ajv.compile(schema);
const errorsOf = (v: unknown): string[] =>
  validateValues(v) ? [] : (validateValues.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`);

/** values.yaml with `edit` applied to a deep copy. */
function valuesWith(edit: (v: Values) => void): Values {
  const copy = structuredClone(values);
  edit(copy);
  return copy;
}

/** The commented-out example job under `jobs:` in values.yaml, uncommented. */
function commentedExampleJob(): Values {
  const lines = readFileSync(path.join(CHART_DIR, 'values.yaml'), 'utf8').split('\n');
  const start = lines.findIndex((l) => /^ {2}# - name: /.test(l));
  expect(start, 'a commented example job under jobs:').toBeGreaterThan(0);
  const block: string[] = [];
  for (let i = start; i < lines.length && /^ {2}# {1,3}\S/.test(lines[i]!); i++) block.push(lines[i]!.replace(/^ {2}# /, ''));
  return (parseYaml(block.join('\n')) as Values[])[0]!;
}

describe('Chart.yaml', () => {
  it('is a v2 application chart whose appVersion is the package version', () => {
    const chart = readYaml<Record<string, string>>(path.join(CHART_DIR, 'Chart.yaml'));
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
    expect(chart).toMatchObject({ apiVersion: 'v2', name: 'leasejob', type: 'application', appVersion: pkg.version });
    expect(chart.version).toMatch(/^\d+\.\d+\.\d+(-[\w.]+)?$/);
    expect(chart.kubeVersion).toBe('>=1.27.0-0');
  });
});

describe('values.yaml against values.schema.json', () => {
  it('the schema is a strict draft-07 schema (what Helm 3 and 4 both read)', () => {
    expect(schema.$schema).toBe('http://json-schema.org/draft-07/schema#');
  });

  it('values.yaml validates once a database is given, and is refused without one (no example URL to install)', () => {
    expect(errorsOf(values)).toEqual([]);
    expect(chartValues().database).toMatchObject({ url: '', existingSecret: '' });
    expect(errorsOf(chartValues()).join('\n')).toMatch(/\/database\/url must be equal to constant .*the postgres:\/\/ URL of leasejob's database, or database.existingSecret/);
  });

  it('the commented example job in values.yaml validates too', () => {
    const job = commentedExampleJob();
    expect(job.name).toBe('nightly-close');
    expect(errorsOf(valuesWith((v) => v.jobs.push(job)))).toEqual([]);
  });

  it.each([
    ['a misspelt key', (v: Values) => (v.jobDefaults.tll = '90s'), /must NOT have additional properties.*tll/],
    ['a 4-field schedule', (v: Values) => (v.jobs[0].schedule = '0 0 * *'), /\/jobs\/0\/schedule must be equal to constant .*a cron schedule of 5 fields/],
    ['a duration in words', (v: Values) => (v.jobDefaults.ttl = '90 seconds'), /\/jobDefaults\/ttl must match pattern/],
    ['an unknown --on-busy', (v: Values) => (v.jobs[0].onBusy = 'queue'), /\/jobs\/0\/onBusy must be equal to one of the allowed values/],
    ['a job name that is not a DNS label', (v: Values) => (v.jobs[0].name = 'Nightly_Close'), /\/jobs\/0\/name must match pattern/],
    ['a job without command', (v: Values) => delete v.jobs[0].command, /must have required property 'command'/],
    ['a schema name that is not an identifier', (v: Values) => (v.database.schema = 'lease-job'), /\/database\/schema must match pattern/],
    ['no URL and no existing Secret', (v: Values) => (v.database.url = ''), /\/database\/url must be equal to constant/],
    ['a fractional grace period', (v: Values) => (v.jobDefaults.terminationGracePeriodSeconds = 30.5), /terminationGracePeriodSeconds must be equal to constant/],
    ['an unknown inject.mode', (v: Values) => (v.inject.mode = 'csi'), /\/inject\/mode must be equal to one of the allowed values/],
    ['an emptyDir size that is no quantity', (v: Values) => (v.inject.sizeLimit = 'lots'), /\/inject\/sizeLimit must match pattern/],
  ])('rejects %s', (_what, edit, message) => {
    expect(errorsOf(valuesWith(edit)).join('\n')).toMatch(message);
  });

  it('prune: olderThan is a positive duration, batchSize within 1-100000, no unknown keys', () => {
    expect(errorsOf(valuesWith((v) => { v.prune.olderThan = '30d'; v.prune.batchSize = 500; }))).toEqual([]);
    for (const bad of [{ olderThan: '0' }, { olderThan: '' }, { olderThan: 'soon' }, { batchSize: 0 }, { batchSize: 100_001 }, { retention: '90d' }]) {
      expect(errorsOf(valuesWith((v) => Object.assign(v.prune, bad))), JSON.stringify(bad)).not.toEqual([]);
    }
  });

  it('accepts an empty URL when an existing Secret is named', () => {
    expect(errorsOf(valuesWith((v) => Object.assign(v.database, { url: '', existingSecret: 'pg' })))).toEqual([]);
  });

  it('documents every job setting: jobDefaults in values.yaml has exactly the schema\'s keys', () => {
    expect(Object.keys(values.jobDefaults).sort()).toEqual(Object.keys(schema.properties.jobDefaults.properties).sort());
  });

  it('every job setting (jobDefaults) is also accepted on a job', () => {
    const jobProps = Object.keys(schema.properties.jobs.items.properties);
    for (const key of Object.keys(schema.properties.jobDefaults.properties)) expect(jobProps).toContain(key);
  });
});

describe('the templates read only values that exist', () => {
  const refs = chartTemplates().flatMap(({ name, text }) => valuesRefs(name, text, { mergedJobVar: '$j' }));
  const jobKeys = Object.keys(schema.properties.jobs.items.properties);
  /** `$job.k` (a job merged over jobDefaults): a jobDefaults key, or a job's own key from the schema. */
  const resolve = (p: string): boolean => {
    if (!p.startsWith('$job.')) return pathExists(values, p);
    const rest = p.slice('$job.'.length);
    return pathExists(values.jobDefaults, rest) || values.jobs.some((j: Values) => pathExists(j, rest)) || jobKeys.includes(rest.split('.')[0]!);
  };

  it('the scan finds references of every kind (so an empty result cannot pass)', () => {
    const paths = new Set(refs.map((r) => r.path));
    for (const p of ['database.secretKey', 'database.schema', '$job.schedule', '$job.timeZone', 'jobs[].name', 'prometheusRule.runFailed.for', 'exporter.port', 'podSecurityContext']) {
      expect(paths, p).toContain(p);
    }
  });

  it('every .Values path used in a template exists in values.yaml', () => {
    const missing = refs.filter((r) => !resolve(r.path)).map((r) => `${r.file}:${r.line} ${r.path}`);
    expect(missing).toEqual([]);
  });

  it('catches a path that does not exist', () => {
    const bad = valuesRefs('t.yaml', '{{ .Values.databse.url }}\n{{ with .Values.exporter }}{{ .prot }}{{ end }}\n{{ $r := .Values.prometheusRule }}{{ $r.runFailed.fro }}');
    expect(bad.map((r) => r.path).filter((p) => !resolve(p))).toEqual(['databse.url', 'exporter.prot', 'prometheusRule.runFailed.fro']);
  });

  it('every value in values.yaml is read by some template (no dead settings)', () => {
    const used = refs.map((r) => r.path.replace(/^\$job\./, 'jobDefaults.'));
    const usedJobKeys = new Set(refs.filter((r) => r.path.startsWith('$job.') || r.path.startsWith('jobs[].')).map((r) => r.path.replace(/^(\$job|jobs\[\])\./, '').split('.')[0]!));
    const covered = (key: string): boolean => used.some((u) => u === key || u.startsWith(`${key}.`) || key.startsWith(`${u}.`));
    const keys: string[] = [];
    for (const [k, v] of Object.entries(values)) {
      keys.push(k);
      if (v && typeof v === 'object' && !Array.isArray(v) && !['podSecurityContext', 'securityContext', 'jobDefaults'].includes(k)) {
        for (const k2 of Object.keys(v)) keys.push(`${k}.${k2}`);
      }
    }
    expect(keys.filter((k) => !covered(k))).toEqual([]);
    const jobSettings = [...Object.keys(values.jobDefaults), ...values.jobs.flatMap((j: Values) => Object.keys(j))];
    expect([...new Set(jobSettings.filter((k) => !usedJobKeys.has(k)))]).toEqual([]);
  });
});

describe('deploy/kubernetes says what the chart says', () => {
  const cronTpl = chartTemplate('cronjob.yaml');
  const cronLines = cronTpl.split('\n').map((l) => l.trim());
  const helpers = chartTemplate('_helpers.tpl');
  const name = fullname(PLAIN_RELEASE);
  const plainCronJobs = plainObjects().filter(({ object }) => object.kind === 'CronJob' && object.metadata.name !== `${fullname(PLAIN_RELEASE)}-prune`).map(({ object }) => object as K8sObject & { spec: any });

  it('one CronJob per values job, named <fullname>-<job>', () => {
    expect(plainCronJobs.map((c) => c.metadata.name).sort()).toEqual(values.jobs.map((j: Values) => `${name}-${j.name}`).sort());
  });

  for (const entry of values.jobs as Values[]) {
    const job = mergedJob(values, entry);
    const cron = (): K8sObject & { spec: any } => plainObject('CronJob', `${name}-${job.name}`) as K8sObject & { spec: any };
    const container = (): Record<string, any> => podSpecOf(cron()).containers[0];

    it(`${job.name}: schedule, timeZone, concurrencyPolicy and Job settings come from the values`, () => {
      const c = cron();
      expect(c.spec).toMatchObject({
        schedule: job.schedule,
        timeZone: job.timeZone,
        concurrencyPolicy: job.concurrencyPolicy,
        startingDeadlineSeconds: job.startingDeadlineSeconds,
        suspend: job.suspend,
        successfulJobsHistoryLimit: job.successfulJobsHistoryLimit,
        failedJobsHistoryLimit: job.failedJobsHistoryLimit,
      });
      expect(c.spec.concurrencyPolicy).toBe('Forbid');
      const jobSpec = c.spec.jobTemplate.spec;
      expect(jobSpec.backoffLimit).toBe(job.backoffLimit);
      expect(jobSpec.ttlSecondsAfterFinished).toBe(job.ttlSecondsAfterFinished || undefined);
      expect(jobSpec.activeDeadlineSeconds).toBe(job.activeDeadlineSeconds || undefined);
      expect(jobSpec.podFailurePolicy).toEqual(job.podFailurePolicy);
      for (const field of ['schedule', 'timeZone', 'concurrencyPolicy', 'startingDeadlineSeconds', 'backoffLimit']) {
        expect(cronLines.find((l) => l.startsWith(`${field}:`)), `cronjob.yaml ${field}`).toContain(`$j.${field}`);
      }
    });

    it(`${job.name}: restartPolicy Never, and a grace period longer than --kill-grace plus the release`, () => {
      const pod = podSpecOf(cron());
      expect(pod.restartPolicy).toBe('Never');
      expect(pod.terminationGracePeriodSeconds).toBe(job.terminationGracePeriodSeconds);
      expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(parseDuration(job.killGrace, '--kill-grace') + 5_000);
      expect(cronLines).toContain('restartPolicy: Never');
      expect(cronLines.find((l) => l.startsWith('terminationGracePeriodSeconds:'))).toContain('$j.terminationGracePeriodSeconds');
    });

    it(`${job.name}: command and args are \`leasejob run\` with the flags the values ask for, through the injected start`, () => {
      const c = container();
      expect(c.command).toEqual(['/leasejob/busybox', 'sh', '/leasejob/start']);
      expect(c.args).toEqual(expectedRunArgs(values, job));
    });

    it(`${job.name}: leasejob is copied: an init container from the leasejob image fills a bounded emptyDir the job's container reads`, () => {
      const pod = podSpecOf(cron());
      expect(pod.initContainers).toHaveLength(1);
      const init = pod.initContainers[0];
      expect(init.image).toMatch(new RegExp(`^${values.image.repository}:`));
      expect(init.command).toEqual(['/leasejob/busybox', 'cp', '-R', '/leasejob/.', '/inject/']);
      expect(init.volumeMounts).toEqual([{ name: 'leasejob', mountPath: '/inject' }]);
      expect(container().volumeMounts).toContainEqual({ name: 'leasejob', mountPath: '/leasejob', readOnly: true });
      expect(pod.volumes).toContainEqual({ name: 'leasejob', emptyDir: { sizeLimit: values.inject.sizeLimit } });
      // Sized from the measured payload (docs/deploy/container.md: 136,875,407 bytes on x86-64),
      // with room: the emptyDir's limit, the ephemeral storage it reserves, and the memory its
      // page cache takes while it is written.
      const payload = 136_875_407;
      const mib = (q: string): number => Number(/^(\d+)Mi$/.exec(q)![1]) * 2 ** 20;
      expect(mib(values.inject.sizeLimit)).toBeGreaterThan(payload * 1.15);
      expect(init.resources.requests['ephemeral-storage']).toBe(values.inject.sizeLimit);
      expect(mib(init.resources.requests.memory)).toBeGreaterThan(payload);
      expect(mib(init.resources.limits.memory)).toBeGreaterThan(payload * 2);
      // What the init container copies is what the image puts there (Dockerfile), and what the
      // start script runs.
      const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
      expect(dockerfile).toContain('COPY --from=build /app/inject /leasejob\n');
      expect(dockerfile).toContain('node scripts/inject-dir.mjs --file /app/leasejob --out /app/inject');
      const start = readFileSync(path.join(ROOT, 'deploy', 'inject', 'start'), 'utf8');
      expect(start).toContain('exec "$dir/tini" -s -- "$dir/leasejob" "$@"');
    });

    it(`${job.name}: the node's name from the downward API (clock measurements are the node's)`, () => {
      const env = container().env as Array<{ name: string; valueFrom?: any }>;
      expect(env.find((e) => e.name === 'LEASEJOB_NODE_NAME')?.valueFrom).toEqual({ fieldRef: { fieldPath: 'spec.nodeName' } });
    });

    it(`${job.name}: JOB_NAME from the downward API label, the URL as a file (LEASEJOB_DATABASE_URL_FILE) from the Secret's volume`, () => {
      const env = container().env as Array<{ name: string; value?: string; valueFrom?: any }>;
      const byName = Object.fromEntries(env.map((e) => [e.name, e]));
      const label = "metadata.labels['batch.kubernetes.io/job-name']";
      expect(byName.JOB_NAME?.valueFrom).toEqual({ fieldRef: { fieldPath: label } });
      expect(cronTpl).toContain(`fieldPath: ${label}`);
      // Not in leasejob's environment, which its child (the same user) could read in /proc.
      expect(byName.LEASEJOB_DATABASE_URL).toBeUndefined();
      expect(byName.LEASEJOB_DATABASE_URL_FILE?.value).toBe('/etc/leasejob/database/url');
      expect(byName.LEASEJOB_LOG_LEVEL?.value).toBe(values.logLevel);
      expect(byName.DATABASE_URL).toBeUndefined();
      const mount = (container().volumeMounts as Array<{ name: string; mountPath: string; readOnly?: boolean }>).find((m) => m.name === 'database-url');
      expect(mount).toEqual({ name: 'database-url', mountPath: '/etc/leasejob/database', readOnly: true });
      const volume = (podSpecOf(cron()).volumes as Array<{ name: string; secret?: unknown }>).find((v) => v.name === 'database-url');
      expect(volume?.secret).toEqual({ secretName: `${name}-database`, items: [{ key: values.database.secretKey, path: 'url' }], defaultMode: 0o440 });
      expect(helpers).toMatch(/define "leasejob.databaseVolume"[\s\S]*secretName: \{\{ include "leasejob.databaseSecretName" \. \}\}[\s\S]*key: \{\{ \.Values\.database\.secretKey \}\}/);
      expect(cronTpl).toContain('{{- include "leasejob.runnerEnv" $');
    });
  }

  it('the template maps each value to its `leasejob run` flag, in the order the args have', () => {
    const at = RUN_FLAGS.map(({ key, flag }) => {
      const i = cronLines.indexOf(`- ${flag}`);
      expect(i, `cronjob.yaml has "- ${flag}"`).toBeGreaterThan(0);
      // --name takes the lease name: leaseName, else name ($leaseName).
      const ref = key === 'name' ? '$leaseName' : `$j.${key}`;
      expect(cronLines.slice(i - 1, i + 2).join('\n'), `${flag} next to ${ref}`).toContain(ref);
      return i;
    });
    expect(at).toEqual([...at].sort((a, b) => a - b));
    // No flag in the template that the table (and so this test) does not know.
    const known = new Set([...RUN_FLAGS.map((f) => f.flag), '--schema', '--']);
    expect(cronLines.filter((l) => /^- --/.test(l) && !known.has(l.slice(2)))).toEqual([]);
    expect(cronLines.slice(cronLines.indexOf('- --schema'), cronLines.indexOf('- --schema') + 2).join('\n')).toContain('$.Values.database.schema');
  });

  it('the plain migration Job is the hook without its Helm annotations', () => {
    const tpl = chartTemplate('migration-job.yaml');
    expect(tpl).toContain('helm.sh/hook: pre-install,pre-upgrade');
    const job = plainObject('Job', `${name}-migrate`) as K8sObject & { spec: any };
    expect(job.metadata.annotations ?? {}).toEqual({});
    const c = podSpecOf(job).containers[0];
    expect(c.command).toEqual(values.entrypoint);
    expect(c.args).toEqual(['migrate', '--schema', values.database.schema, ...values.migration.grantTo.flatMap((role: string) => ['--grant-to', role])]);
    expect(c.env.find((e: { name: string }) => e.name === 'LEASEJOB_DATABASE_URL').valueFrom.secretKeyRef).toEqual({ name: `${name}-database`, key: values.database.secretKey });
    expect(job.spec.backoffLimit).toBe(values.migration.backoffLimit);
    expect(job.spec.ttlSecondsAfterFinished).toBe(values.migration.ttlSecondsAfterFinished);
  });

  it('the plain Secret is the chart-made one, without hook annotations', () => {
    expect(chartTemplate('secret.yaml')).toMatch(/helm\.sh\/hook: pre-install,pre-upgrade[\s\S]*helm\.sh\/hook-weight: "-10"/);
    const secret = plainObject('Secret', `${name}-database`);
    expect(secret.stringData).toEqual({ [values.database.secretKey]: EXAMPLE_DATABASE_URL });
    expect(secret.metadata.annotations ?? {}).toEqual({});
  });

  it('the plain exporter runs `leasejob exporter --port` on the values\' port, behind the Service', () => {
    const dep = plainObject('Deployment', `${name}-exporter`) as K8sObject & { spec: any };
    const c = podSpecOf(dep).containers[0];
    expect(c.command).toEqual(values.entrypoint);
    expect(c.args).toEqual(['exporter', '--port', String(values.exporter.port), '--schema', values.database.schema]);
    expect(c.ports).toEqual([{ name: 'metrics', containerPort: values.exporter.port, protocol: 'TCP' }]);
    expect(c.readinessProbe.httpGet).toEqual({ path: '/healthz', port: 'metrics' });
    const svc = plainObject('Service', `${name}-exporter`) as K8sObject & { spec: any };
    expect(svc.spec.ports).toEqual([{ name: 'metrics', port: values.exporter.service.port, targetPort: 'metrics', protocol: 'TCP' }]);
  });

  it('nothing Helm-specific is left in the plain manifests', () => {
    const strings = plainObjects().flatMap(({ object }) => allStrings(object));
    expect(strings.filter((s) => s.includes('helm.sh/') || s === 'Helm' || s.includes('{{'))).toEqual([]);
  });
});

describe('the plain manifests\' commands, run by the real CLI against PostgreSQL', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await testDb({ migrated: false });
  });
  afterAll(async () => db?.close());

  /**
   * A container's command + args as a local command line: `tini -- leasejob`, or the injected
   * `/leasejob/busybox sh /leasejob/start` (single-file.test.ts runs that one), becomes `node bin/leasejob.js`.
   */
  function localArgs(c: { command: string[]; args: string[] }, schemaName: string): string[] {
    const words = [...c.command, ...c.args];
    const args = words.slice(words.findIndex((w) => w === 'leasejob' || w === '/leasejob/start') + 1);
    const i = args.indexOf('--schema');
    expect(i).toBeGreaterThan(0);
    args[i + 1] = schemaName;
    return args;
  }

  it('the migration Job migrates, then the CronJob runs its occurrence once, read from JOB_NAME', async () => {
    const schemaName = newSchemaName('deploy');
    const env = { LEASEJOB_DATABASE_URL: db.url, DATABASE_URL: undefined, LEASEJOB_LOG_LEVEL: 'info' };
    const migrate = await runCli(localArgs(podSpecOf(plainObject('Job', 'leasejob-migrate')).containers[0], schemaName), env);
    expect(migrate.exitCode, migrate.all).toBe(0);

    const cron = plainObject('CronJob', 'leasejob-example');
    const args = localArgs(podSpecOf(cron).containers[0], schemaName);
    // The controller names the Job <cronjob>-<scheduled unix minutes>, a tick of the schedule
    // (*/5 * * * *); the pod starts later.
    const minutes = Math.floor((Math.floor(Date.now() / 60_000) - 3) / 5) * 5;
    const jobEnv = { ...env, JOB_NAME: `leasejob-example-${minutes}`, KUBERNETES_SERVICE_HOST: '10.0.0.1' };
    const first = await runCli(args, jobEnv);
    expect(first.exitCode, first.all).toBe(0);
    const rows = await db.rows<{ window_key: string; scheduled_at: Date; attempts: number; completed_at: Date | null }>(
      `SELECT window_key, scheduled_at, attempts, completed_at FROM "${schemaName}".windows WHERE job = 'example'`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.scheduled_at.getTime()).toBe(minutes * 60_000);
    expect(new Date(rows[0]!.window_key).getTime()).toBe(minutes * 60_000);
    expect(rows[0]!.completed_at).not.toBeNull();
    expect(first.stdout).toContain(`window ${rows[0]!.window_key} attempt 1 fence `);

    // A retry or duplicate of the same Job: the window is done, the command does not run again.
    const again = await runCli(args, jobEnv);
    expect(again.exitCode, again.all).toBe(0);
    expect(again.stdout).not.toContain('window ');
    expect(again.stderr).toContain('window already completed');
  });
});

const helm = findTool('helm', 'LEASEJOB_HELM');
if (!helm) console.log('skipping `helm lint` and `helm template` comparisons: no helm on PATH (set LEASEJOB_HELM to use one)');

describe.skipIf(!helm)('with a helm binary', () => {
  // `helm template` assumes the Kubernetes version its client library was built for (1.25 for
  // Helm 3.10), which can be older than the chart's kubeVersion: render for the oldest it allows.
  const KUBE_VERSION = ['--kube-version', '1.27.0'];
  const render = (args: string[]): K8sObject[] => {
    const r = spawnSync(helm!, ['template', ...args, '--set', DATABASE_SET, ...KUBE_VERSION], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    return parseDocuments(r.stdout, 'helm template') as K8sObject[];
  };
  const byKey = (list: K8sObject[]): Record<string, K8sObject> => Object.fromEntries(list.map((o) => [`${o.kind}/${o.metadata.name}`, o]));

  it('helm lint --strict passes', () => {
    const r = spawnSync(helm!, ['lint', '--strict', CHART_DIR, '--set', DATABASE_SET], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stdout + r.stderr).toBe(0);
  });

  it('`helm template leasejob helm/leasejob` equals deploy/kubernetes, but for Helm\'s labels and hooks', () => {
    const rendered = render([PLAIN_RELEASE, CHART_DIR]).map(withoutHelmMetadata);
    expect(byKey(rendered)).toEqual(byKey(plainObjects().map(({ object }) => object)));
  });

  it('every option on renders valid Kubernetes objects', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-helm-'));
    try {
      const file = path.join(dir, 'values.yaml');
      const extra = {
        database: { existingSecret: 'pg', secretKey: 'url' }, serviceAccountName: 'jobs', imagePullSecrets: [{ name: 'regcred' }],
        migration: { existingSecret: 'pg-owner', grantTo: ['leasejob_runner'] }, jobDefaults: { alertAfter: '10m' },
        podLabels: { team: 'billing' }, nodeSelector: { pool: 'batch' }, tolerations: [{ key: 'batch', operator: 'Exists' }],
        serviceMonitor: { enabled: true }, prometheusRule: { enabled: true }, grafanaDashboard: { enabled: true, annotations: { grafana_folder: 'Jobs' } },
        jobs: [...values.jobs, { ...commentedExampleJob(), entrypoint: ['leasejob'], passDatabaseUrl: true, maxDelay: '6h', catchUp: '1d', catchUpLimit: 24, activeDeadlineSeconds: 7200,
          pingUrlSecret: { name: 'hc-nightly', key: 'url' }, notifyUrlSecret: { name: 'hooks', key: 'billing' }, recordOutput: '16KiB',
          env: [{ name: 'A', value: 'b' }], volumes: [{ name: 'cfg', configMap: { name: 'cfg' } }], volumeMounts: [{ name: 'cfg', mountPath: '/etc/cfg' }] }],
      };
      writeFileSync(file, JSON.stringify(extra));
      const objects = render(['rel', CHART_DIR, '--namespace', 'billing', '-f', file]);
      // Two jobs and the prune CronJob; the dashboard's ConfigMap.
      expect(objects.map((o) => o.kind).sort()).toEqual(['ConfigMap', 'CronJob', 'CronJob', 'CronJob', 'Deployment', 'Job', 'PrometheusRule', 'Service', 'ServiceMonitor']);
      for (const o of objects.filter((x) => !['ServiceMonitor', 'PrometheusRule'].includes(x.kind))) {
        expect(await schemaErrors(o), `${o.kind} ${o.metadata.name}`).toEqual([]);
        expect(unknownFields(o), `${o.kind} ${o.metadata.name}`).toEqual([]);
      }
      const migration = podSpecOf(objects.find((o) => o.kind === 'Job')!).containers[0];
      expect(migration.args).toEqual(['migrate', '--schema', 'leasejob', '--grant-to', 'leasejob_runner']);
      expect(migration.env[0].valueFrom.secretKeyRef).toEqual({ name: 'pg-owner', key: 'database-url' });
      // prune deletes rows: it runs as the schema owner, as the migration does.
      const prune = podSpecOf(objects.find((o) => o.kind === 'CronJob' && o.metadata.name === 'rel-leasejob-prune')!).containers[0];
      expect(prune.args).toEqual(['prune', '--older-than', '90d', '--batch-size', '2000', '--schema', 'leasejob']);
      expect(prune.env[0].valueFrom.secretKeyRef).toEqual({ name: 'pg-owner', key: 'database-url' });
      for (const cron of objects.filter((o) => o.kind === 'CronJob' && o.metadata.name !== 'rel-leasejob-prune')) {
        const args = podSpecOf(cron).containers[0].args as string[];
        expect(args.slice(args.indexOf('--alert-after'), args.indexOf('--alert-after') + 2)).toEqual(['--alert-after', '10m']);
      }
      // The ping and webhook URLs come from their Secrets as environment, never as args; a job without them has none.
      const [plainJob, notifying] = objects.filter((o) => o.kind === 'CronJob').map((o) => podSpecOf(o).containers[0] as { args: string[]; env: Array<{ name: string; valueFrom?: unknown }> });
      const envOf = (c: typeof notifying) => Object.fromEntries(c!.env.map((e) => [e.name, e.valueFrom]));
      expect(envOf(notifying).LEASEJOB_PING_URL).toEqual({ secretKeyRef: { name: 'hc-nightly', key: 'url' } });
      expect(envOf(notifying).LEASEJOB_NOTIFY_URL).toEqual({ secretKeyRef: { name: 'hooks', key: 'billing' } });
      expect(notifying!.args.slice(notifying!.args.indexOf('--record-output'), notifying!.args.indexOf('--record-output') + 2)).toEqual(['--record-output', '16KiB']);
      expect(envOf(plainJob).LEASEJOB_PING_URL).toBeUndefined();
      expect(envOf(plainJob).LEASEJOB_NOTIFY_URL).toBeUndefined();
      expect(plainJob!.args).not.toContain('--record-output');
      // Catch-up per job: only the job that asks for it.
      const catchUp = objects.filter((o) => o.kind === 'CronJob').map((o) => podSpecOf(o).containers[0].args as string[])
        .map((args) => args.includes('--catch-up') ? args.slice(args.indexOf('--catch-up'), args.indexOf('--catch-up') + 4) : []);
      expect(catchUp).toContainEqual(['--catch-up', '1d', '--catch-up-limit', '24']);
      expect(catchUp).toContainEqual([]);
      const rule = objects.find((o) => o.kind === 'PrometheusRule') as K8sObject & { spec: any };
      const exprs = rule.spec.groups[0].rules.map((r: { expr: string }) => r.expr).join('\n');
      for (const metric of ['leasejob_failed_occurrences', 'leasejob_due_occurrences_not_completed', 'leasejob_lease_held_seconds', 'leasejob_leases_lost_total', 'leasejob_clock_offset_seconds', 'leasejob_clock_offset_uncertainty_seconds', 'leasejob_up']) {
        expect(exprs).toContain(`${metric}{namespace="billing", service="rel-leasejob-exporter"}`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a bad schedule and an unknown zone in words, not as a regular expression or the zone list (issue 20)', () => {
    const fail = (set: string): string => spawnSync(helm!, ['template', 'x', CHART_DIR, '--set', DATABASE_SET, '--set', set, ...KUBE_VERSION], { encoding: 'utf8', timeout: 60_000 }).stderr;
    const job = 'jobs[0].name=a,jobs[0].command[0]=echo';
    const schedule = fail(`${job},jobs[0].schedule=61 * * * *`);
    expect(schedule).toContain("at '/jobs/0/schedule'");
    expect(schedule).toContain('a cron schedule whose minute (1st field) is 0-59');
    expect(schedule).not.toMatch(/pattern|\(\?:/);
    const zone = fail(`${job},jobs[0].schedule=@daily,jobs[0].timeZone=America/Sao_Paolo`);
    expect(zone).toContain("at '/jobs/0/timeZone'");
    expect(zone).toContain('an IANA time zone name of the tz database');
    expect(zone).not.toContain('America/Sao_Paulo"');
    expect(zone.length).toBeLessThan(600);
    expect(fail(`${job},jobs[0].schedule=@daily,jobs[0].timeZone=America/Sao_Paulo`)).toBe('');
  });

  it('inject.enabled=false, or a job with its own entrypoint: the image carries leasejob, no init container (the rendering before injection)', () => {
    const cronJob = (objects: K8sObject[], name: string) => podSpecOf(objects.find((o) => o.kind === 'CronJob' && o.metadata.name === name)!);
    const off = cronJob(render(['x', CHART_DIR, '--set', 'inject.enabled=false']), 'x-leasejob-example');
    expect(off.initContainers).toBeUndefined();
    expect(off.containers[0].command).toEqual(values.entrypoint);
    expect(off.containers[0].volumeMounts.map((m: { name: string }) => m.name)).toEqual(['tmp', 'database-url']);
    expect(off.volumes.map((v: { name: string }) => v.name)).toEqual(['tmp', 'database-url']);
    const own = render(['x', CHART_DIR, '--set', 'jobs[0].name=own,jobs[0].schedule=@daily,jobs[0].command[0]=echo,jobs[0].entrypoint[0]=leasejob']);
    expect(cronJob(own, 'x-leasejob-own').initContainers).toBeUndefined();
    expect(cronJob(own, 'x-leasejob-own').containers[0].command).toEqual(['leasejob']);
  });

  it('inject.mode=imageVolume: the job mounts the leasejob image read-only, no init container, nothing copied; valid Kubernetes objects', async () => {
    const imageVolume = (kube: string) =>
      spawnSync(helm!, ['template', 'x', CHART_DIR, '--set', DATABASE_SET, '--set', 'inject.mode=imageVolume',
        '--set', 'image.repository=registry.example.com/leasejob,image.tag=1.2.3', '--kube-version', kube], { encoding: 'utf8', timeout: 60_000 }); // prettier-ignore
    // A cluster older than the field with subPath: refused, saying what to use instead.
    const old = imageVolume('1.32.4');
    expect(old.status).not.toBe(0);
    expect(old.stderr).toContain('image volumes with subPath need Kubernetes 1.33 or later');
    expect(old.stderr).toContain('use inject.mode=copy');
    const r = imageVolume('1.35.0');
    expect(r.status, r.stderr).toBe(0);
    const objects = parseDocuments(r.stdout, 'helm template') as K8sObject[];
    const cron = objects.find((o) => o.kind === 'CronJob' && o.metadata.name === 'x-leasejob-example')!;
    const pod = podSpecOf(cron);
    expect(pod.initContainers).toBeUndefined();
    expect(pod.volumes).toContainEqual({ name: 'leasejob', image: { reference: 'registry.example.com/leasejob:1.2.3', pullPolicy: 'IfNotPresent' } });
    expect(pod.volumes.filter((v: { emptyDir?: unknown }) => v.emptyDir)).toEqual([{ name: 'tmp', emptyDir: {} }]);
    expect(pod.containers[0].volumeMounts).toContainEqual({ name: 'leasejob', mountPath: '/leasejob', subPath: 'leasejob', readOnly: true });
    expect(pod.containers[0].command).toEqual(['/leasejob/busybox', 'sh', '/leasejob/start']);
    // kubernetes-models' Volume has `image` (ImageVolumeSource): validated as the API server would.
    for (const o of objects) {
      expect(await schemaErrors(o), `${o.kind} ${o.metadata.name}`).toEqual([]);
      expect(unknownFields(o), `${o.kind} ${o.metadata.name}`).toEqual([]);
    }
    // Copy mode, the default, renders no image volume.
    expect(JSON.stringify(render(['x', CHART_DIR]))).not.toContain('"reference"');
    expect(errorsOf(valuesWith((v) => (v.inject.mode = 'csi'))).join('\n')).toMatch(/\/inject\/mode must be equal to one of the allowed values/);
  });

  it('a third-party image: per-job securityContext and podSecurityContext replace the chart-wide ones; resources, env and volumeMounts are the job\'s', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-helm-'));
    try {
      const file = path.join(dir, 'values.yaml');
      const thirdParty = {
        name: 'vendor', schedule: '@daily', command: ['/app/report'], image: { repository: 'vendor/report', tag: '7' },
        securityContext: { runAsUser: 0, readOnlyRootFilesystem: false }, podSecurityContext: {},
        resources: { requests: { cpu: '1', memory: '1Gi' } }, env: [{ name: 'MODE', value: 'full' }],
        volumes: [{ name: 'data', emptyDir: {} }], volumeMounts: [{ name: 'data', mountPath: '/var/lib/report' }],
      };
      writeFileSync(file, JSON.stringify({ jobs: [...values.jobs, thirdParty] }));
      expect(errorsOf(valuesWith((v) => v.jobs.push(thirdParty)))).toEqual([]);
      const objects = render(['x', CHART_DIR, '-f', file]);
      const podOf = (job: string) => podSpecOf(objects.find((o) => o.kind === 'CronJob' && o.metadata.name === `x-leasejob-${job}`)!);
      const vendor = podOf('vendor');
      expect(vendor.securityContext).toBeUndefined();
      expect(vendor.containers[0].securityContext).toEqual({ runAsUser: 0, readOnlyRootFilesystem: false });
      expect(vendor.containers[0].image).toBe('vendor/report:7');
      expect(vendor.containers[0].resources).toEqual(thirdParty.resources);
      expect(vendor.containers[0].env).toContainEqual({ name: 'MODE', value: 'full' });
      expect(vendor.containers[0].volumeMounts).toContainEqual({ name: 'data', mountPath: '/var/lib/report' });
      // The init container keeps the chart's hardening: it runs the chart's own image.
      expect(vendor.initContainers[0].securityContext).toEqual(values.securityContext);
      // The other job keeps the chart-wide ones.
      const example = podOf('example');
      expect(example.securityContext).toEqual(values.podSecurityContext);
      expect(example.containers[0].securityContext).toEqual(values.securityContext);
      for (const o of objects) {
        expect(await schemaErrors(o), `${o.kind} ${o.metadata.name}`).toEqual([]);
        expect(unknownFields(o), `${o.kind} ${o.metadata.name}`).toEqual([]);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('inject.enabled=false: a job in another image must say it carries leasejob (its entrypoint), or the chart refuses it with the reason', () => {
    const job = 'jobs[0].name=vendor,jobs[0].schedule=@daily,jobs[0].command[0]=/app/report,jobs[0].image.repository=vendor/report';
    const r = spawnSync(helm!, ['template', 'x', CHART_DIR, '--set', DATABASE_SET, '--set', `inject.enabled=false,${job}`, ...KUBE_VERSION], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('"vendor" runs in image vendor/report with inject.enabled=false, so that image must carry leasejob itself');
    expect(r.stderr).toContain('Turn inject on');
    // Said so: it renders, running the job's own entrypoint.
    const own = render(['x', CHART_DIR, '--set', `inject.enabled=false,${job},jobs[0].entrypoint[0]=leasejob`]);
    const pod = podSpecOf(own.find((o) => o.kind === 'CronJob' && o.metadata.name === 'x-leasejob-vendor')!);
    expect(pod.containers[0].command).toEqual(['leasejob']);
    // With inject on, any image renders: leasejob is brought to it.
    expect(render(['x', CHART_DIR, '--set', job]).some((o) => o.metadata.name === 'x-leasejob-vendor')).toBe(true);
  });

  it('refuses to render without a database: no existingSecret and no URL is an error naming both, not an example URL', () => {
    const r = spawnSync(helm!, ['template', 'x', CHART_DIR, ...KUBE_VERSION], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain("at '/database/url'");
    expect(r.stderr).toContain('database.existingSecret');
    expect(r.stdout).not.toContain('change-me');
    const withSecret = render(['x', CHART_DIR, '--set', 'database.url=,database.existingSecret=pg']);
    expect(withSecret.map((o) => o.kind)).not.toContain('Secret');
  });

  it('sets resources on every container by default (requests, and a memory limit)', () => {
    for (const o of render(['x', CHART_DIR])) {
      if (!['CronJob', 'Deployment', 'Job'].includes(o.kind)) continue;
      const pod = podSpecOf(o);
      for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
        expect(c.resources?.requests, `${o.kind}/${o.metadata.name} ${c.name}`).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
        expect(c.resources?.limits?.memory, `${o.kind}/${o.metadata.name} ${c.name}`).toEqual(expect.any(String));
      }
    }
  });

  it('refuses at template time the schedules the Kubernetes API server refuses (robfig/cron: day of week 0-6, no L or #)', () => {
    const fail = (set: string): string => spawnSync(helm!, ['template', 'x', CHART_DIR, '--set', DATABASE_SET, '--set', set, ...KUBE_VERSION], { encoding: 'utf8', timeout: 60_000 }).stderr;
    const job = 'jobs[0].name=a,jobs[0].command[0]=echo';
    for (const schedule of ['0 0 * * 7', '0 0 * * 5L', '0 0 * * FRI#2'])
      expect(fail(`${job},jobs[0].schedule=${schedule}`), schedule).toContain('day of week (5th field) is 0-6 (0 is Sunday)');
    expect(fail(`${job},jobs[0].schedule=0 0 L * *`)).toContain('day of month (3rd field) is 1-31');
    expect(fail('prune.schedule=0 3 * * 7')).toContain("at '/prune/schedule'");
    expect(fail(`${job},jobs[0].schedule=0 0 * * 0`)).toBe('');
  });

  it('exporter.statusPage=false starts the exporter with --no-status-page; the default serves the page', () => {
    const argsOf = (...set: string[]): string[] => {
      const deployment = render(['rel', CHART_DIR, ...set.flatMap((x) => ['--set', x])]).find((o) => o.kind === 'Deployment')!;
      return podSpecOf(deployment).containers[0].args as string[];
    };
    expect(argsOf()).not.toContain('--no-status-page');
    expect(argsOf('exporter.statusPage=false')).toEqual(['exporter', '--port', '9464', '--schema', 'leasejob', '--no-status-page']);
  });

  it('the prune CronJob: on by default with the retention of the values, off with prune.enabled=false', () => {
    const cron = render([PLAIN_RELEASE, CHART_DIR, '--set', 'prune.olderThan=400d,prune.schedule=0 4 * * 0']).find((o) => o.metadata.name === 'leasejob-prune') as K8sObject & { spec: any };
    expect(cron.spec.schedule).toBe('0 4 * * 0');
    expect(podSpecOf(cron).containers[0].args.slice(0, 3)).toEqual(['prune', '--older-than', '400d']);
    expect(podSpecOf(cron).containers[0].env[0].valueFrom.secretKeyRef).toEqual({ name: 'leasejob-database', key: 'database-url' });
    expect(render([PLAIN_RELEASE, CHART_DIR, '--set', 'prune.enabled=false']).map((o) => o.metadata.name)).not.toContain('leasejob-prune');
  });

  it('refuses a grace period that does not cover --kill-grace, a kill grace the ttl has no room for, a duplicate job name, and catch-up without windowFromSchedule', () => {
    const fail = (set: string): string => spawnSync(helm!, ['template', 'x', CHART_DIR, '--set', DATABASE_SET, '--set', set, ...KUBE_VERSION], { encoding: 'utf8', timeout: 60_000 }).stderr;
    expect(fail('jobDefaults.killGrace=45s')).toContain('terminationGracePeriodSeconds 45, not more than killGrace 45s + 5s');
    // leasejob run's own rule, at render time rather than as exit 64 on every run: 16s is too
    // short for the default killGrace 10s, 17s is long enough.
    expect(fail('jobDefaults.ttl=10s')).toContain('jobs: "example" has killGrace 10s, not below 5667ms for ttl 10s');
    expect(fail('jobDefaults.ttl=16s')).toContain('not below 9667ms for ttl 16s');
    expect(fail('jobDefaults.ttl=17s')).toBe('');
    expect(fail('jobDefaults.ttl=20s,jobDefaults.killGrace=12s')).toBe('');
    expect(fail('jobs[0].name=a,jobs[0].schedule=@daily,jobs[0].command[0]=echo,jobs[1].name=a,jobs[1].schedule=@daily,jobs[1].command[0]=echo')).toContain('the name "a" appears twice');
    // run's rule again: --catch-up without --window-from-schedule would exit 64 on every run.
    expect(fail('jobDefaults.catchUp=1h,jobDefaults.windowFromSchedule=false')).toContain('jobs: "example" has catchUp 1h but windowFromSchedule false');
    expect(fail('jobDefaults.catchUp=1h')).toBe('');
  });
});

