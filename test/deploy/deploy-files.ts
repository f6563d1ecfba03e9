// The deployment files as data: the plain manifests, the chart's values, schema and templates,
// and the `helm` and `kubectl` binaries when this machine has them.
import { spawnSync } from 'node:child_process';
import { accessSync, constants, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { ROOT } from '../helpers/wait.js';

export const PLAIN_DIR = path.join(ROOT, 'deploy', 'kubernetes');
export const CHART_DIR = path.join(ROOT, 'helm', 'leasejob');
export const TEMPLATES_DIR = path.join(CHART_DIR, 'templates');
/** The plain manifests are the chart rendered as release `leasejob`: fullname `leasejob`. */
export const PLAIN_RELEASE = 'leasejob';

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string>; [k: string]: unknown };
  [k: string]: unknown;
}

/** Every YAML document of a multi-document text; throws on a YAML error. */
export function parseDocuments(text: string, where: string): unknown[] {
  return parseAllDocuments(text)
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`${where}: ${doc.errors.map((e) => e.message).join('; ')}`);
      return doc.toJS() as unknown;
    })
    .filter((d) => d !== null && d !== undefined);
}

export function plainManifestFiles(): string[] {
  return readdirSync(PLAIN_DIR).filter((f) => /\.ya?ml$/.test(f) && f !== 'kustomization.yaml').sort();
}

/** Every object of deploy/kubernetes, with the file it came from. */
export function plainObjects(): Array<{ file: string; object: K8sObject }> {
  return plainManifestFiles().flatMap((file) =>
    parseDocuments(readFileSync(path.join(PLAIN_DIR, file), 'utf8'), file).map((object) => ({ file, object: object as K8sObject })),
  );
}

export function plainObject(kind: string, name: string): K8sObject {
  const found = plainObjects().filter(({ object }) => object.kind === kind && object.metadata?.name === name);
  if (found.length !== 1) throw new Error(`expected one ${kind} ${name} in deploy/kubernetes, found ${found.length}`);
  return found[0]!.object;
}

export function readYaml<T = unknown>(file: string): T {
  return parseYaml(readFileSync(file, 'utf8')) as T;
}

export type Values = Record<string, any>;

export function chartValues(): Values {
  return readYaml<Values>(path.join(CHART_DIR, 'values.yaml'));
}

/** The example URL of the plain manifests' Secret (deploy/kubernetes/secret.yaml), to be replaced there. */
export const EXAMPLE_DATABASE_URL = 'postgres://leasejob:change-me@postgres:5432/leasejob';
/** The chart refuses to render without a database: the `--set` every render here gives it. */
export const DATABASE_SET = `database.url=${EXAMPLE_DATABASE_URL}`;

/** values.yaml as an install gives it: with the database URL that values.yaml leaves to the user. */
export function installValues(): Values {
  const values = chartValues();
  values.database.url = EXAMPLE_DATABASE_URL;
  return values;
}

export function chartTemplate(name: string): string {
  return readFileSync(path.join(TEMPLATES_DIR, name), 'utf8');
}

export function chartTemplates(): Array<{ name: string; text: string }> {
  return readdirSync(TEMPLATES_DIR)
    .filter((f) => /\.(ya?ml|tpl|txt)$/.test(f))
    .sort()
    .map((name) => ({ name, text: chartTemplate(name) }));
}

/** A job entry over jobDefaults, as templates/cronjob.yaml merges them (a key on the job wins). */
export function mergedJob(values: Values, job: Values): Values {
  return { ...values.jobDefaults, ...job };
}

/** The chart's fullname for a release, as _helpers.tpl computes it (no overrides). */
export function fullname(release: string, chartName = 'leasejob'): string {
  return (release.includes(chartName) ? release : `${release}-${chartName}`).slice(0, 63).replace(/-+$/, '');
}

/**
 * The `leasejob run` arguments a job's values must become, written out independently of the
 * template: value key, flag, and how the value turns into arguments. helm-chart.test.ts checks
 * the template against this table, and the plain manifests against its output.
 */
export const RUN_FLAGS: ReadonlyArray<{ key: string; flag: string; kind: 'value' | 'switch' | 'optional' }> = [
  { key: 'name', flag: '--name', kind: 'value' },
  { key: 'schedule', flag: '--schedule', kind: 'value' },
  { key: 'timeZone', flag: '--tz', kind: 'value' },
  { key: 'windowFromSchedule', flag: '--window-from-schedule', kind: 'switch' },
  { key: 'windowFormat', flag: '--window-format', kind: 'optional' },
  { key: 'windowOffset', flag: '--window-offset', kind: 'optional' },
  { key: 'ttl', flag: '--ttl', kind: 'value' },
  { key: 'killGrace', flag: '--kill-grace', kind: 'value' },
  { key: 'onBusy', flag: '--on-busy', kind: 'value' },
  { key: 'waitTimeout', flag: '--wait-timeout', kind: 'optional' },
  { key: 'maxRuntime', flag: '--max-runtime', kind: 'optional' },
  { key: 'maxDelay', flag: '--max-delay', kind: 'optional' },
  { key: 'maxAttempts', flag: '--max-attempts', kind: 'optional' },
  { key: 'retries', flag: '--retries', kind: 'optional' },
  { key: 'retryDelay', flag: '--retry-delay', kind: 'optional' },
  { key: 'catchUp', flag: '--catch-up', kind: 'optional' },
  { key: 'catchUpLimit', flag: '--catch-up-limit', kind: 'optional' },
  { key: 'alertAfter', flag: '--alert-after', kind: 'optional' },
  { key: 'alertLookback', flag: '--alert-lookback', kind: 'optional' },
  { key: 'expectDuration', flag: '--expect-duration', kind: 'optional' },
  { key: 'passDatabaseUrl', flag: '--pass-database-url', kind: 'switch' },
  { key: 'recordOutput', flag: '--record-output', kind: 'optional' },
];

export function expectedRunArgs(values: Values, job: Values): string[] {
  const args = ['run'];
  for (const { key, flag, kind } of RUN_FLAGS) {
    // --name is the lease's name: leaseName when the job gives one, else its object name.
    const v = key === 'name' ? (job.leaseName ?? job.name) : job[key];
    if (kind === 'switch') {
      if (v === true) args.push(flag);
    } else if (kind === 'value' || (v !== undefined && v !== null && v !== '')) {
      args.push(flag, String(v));
    }
  }
  args.push('--schema', values.database.schema, ...(job.extraRunArgs ?? []), '--', ...job.command, ...(job.args ?? []));
  return args;
}

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** A binary from an environment variable (LEASEJOB_HELM, LEASEJOB_KUBECTL) or PATH; undefined when absent. */
export function findTool(name: string, envVar: string, versionArgs: string[] = ['version']): string | undefined {
  const given = process.env[envVar];
  if (given) return executable(given) ? given : undefined;
  for (const dir of (process.env.PATH ?? '').split(path.delimiter).filter(Boolean)) {
    const file = path.join(dir, name);
    if (executable(file) && spawnSync(file, versionArgs, { encoding: 'utf8', timeout: 20_000 }).status === 0) return file;
  }
  return undefined;
}

/** Helm's own labels and hook annotations: what the plain manifests leave out. */
export function withoutHelmMetadata(object: K8sObject): K8sObject {
  const copy = structuredClone(object);
  const strip = (meta: { labels?: Record<string, string>; annotations?: Record<string, string> } | undefined): void => {
    if (!meta) return;
    for (const map of ['labels', 'annotations'] as const) {
      const m = meta[map];
      if (!m) continue;
      for (const k of Object.keys(m)) {
        if (k.startsWith('helm.sh/') || (k === 'app.kubernetes.io/managed-by' && m[k] === 'Helm')) delete m[k];
      }
      if (Object.keys(m).length === 0) delete meta[map];
    }
  };
  strip(copy.metadata);
  return copy;
}

/** Every string found anywhere in a value (keys included), for "this never appears" checks. */
export function allStrings(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  if (Array.isArray(value)) return value.flatMap(allStrings);
  if (value && typeof value === 'object') return Object.entries(value).flatMap(([k, v]) => [k, ...allStrings(v)]);
  return [];
}

/** The pod spec of a workload (CronJob, Job, Deployment). */
export function podSpecOf(object: K8sObject): Record<string, any> {
  const spec = object.spec as Record<string, any>;
  if (object.kind === 'CronJob') return spec.jobTemplate.spec.template.spec;
  return spec.template.spec;
}

export interface PromRule { alert?: string; record?: string; expr: string; for?: string; labels?: Record<string, string>; annotations?: Record<string, string> }

/**
 * The chart's PrometheusRule as `helm template` renders it (its spec is a Prometheus rules
 * file), with `prometheusRule.enabled=true` and any further `--set key=value`.
 */
export function renderRuleSpec(helm: string, opts: { release: string; namespace: string; set?: string[] }): { groups: Array<{ name: string; rules: PromRule[] }> } {
  const sets = [DATABASE_SET, 'prometheusRule.enabled=true', ...(opts.set ?? [])].flatMap((s) => ['--set', s]);
  const r = spawnSync(helm, ['template', opts.release, CHART_DIR, '--namespace', opts.namespace, '--kube-version', '1.27.0',
    ...sets, '--show-only', 'templates/prometheusrule.yaml'], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`helm template failed: ${r.stderr}`);
  const [rule] = parseDocuments(r.stdout, 'helm template') as Array<K8sObject & { spec: { groups: Array<{ name: string; rules: PromRule[] }> } }>;
  if (rule?.kind !== 'PrometheusRule') throw new Error(`helm template rendered ${rule?.kind}, not a PrometheusRule`);
  return rule.spec;
}
