// deploy/kubernetes: every object is valid Kubernetes (OpenAPI schema, no unknown field), the
// objects refer to each other correctly, and kustomize lists every file.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { findTool, parseDocuments, plainManifestFiles, plainObjects, podSpecOf, readYaml, PLAIN_DIR, type K8sObject } from './deploy-files.js';
import { schemaErrors, unknownFields } from './k8s-fields.js';

const objects = plainObjects();
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

describe('deploy/kubernetes manifests', () => {
  it('hold the expected objects', () => {
    const kinds = objects.map(({ object }) => `${object.kind}/${object.metadata.name}`).sort();
    expect(kinds).toEqual(['CronJob/leasejob-example', 'CronJob/leasejob-prune', 'Deployment/leasejob-exporter', 'Job/leasejob-migrate', 'Secret/leasejob-database', 'Service/leasejob-exporter', 'ServiceAccount/leasejob']);
  });

  it.each(objects.map(({ file, object }) => [`${file}: ${object.kind} ${object.metadata?.name}`, object] as const))(
    '%s validates against the Kubernetes OpenAPI schema',
    async (_label, object) => {
      expect(await schemaErrors(object)).toEqual([]);
    },
  );

  it.each(objects.map(({ file, object }) => [`${file}: ${object.kind} ${object.metadata?.name}`, object] as const))(
    '%s has no field Kubernetes does not know (strict field validation)',
    (_label, object) => {
      expect(unknownFields(object)).toEqual([]);
    },
  );

  it('the checks above do reject a broken object (so a pass means something)', async () => {
    const cron = structuredClone(objects.find(({ object }) => object.kind === 'CronJob')!.object) as K8sObject & { spec: any };
    cron.spec.concurrencyPolicy = 'Sometimes';
    cron.spec.jobTemplate.spec.template.spec.restartPolicyy = 'Never';
    delete cron.spec.schedule;
    const errors = await schemaErrors(cron);
    expect(errors.join('\n')).toMatch(/concurrencyPolicy/);
    expect(errors.join('\n')).toMatch(/schedule/);
    expect(unknownFields(cron)).toEqual(['spec.jobTemplate.spec.template.spec.restartPolicyy']);
  });

  it('names are DNS labels, and a CronJob name leaves room for the controller\'s 11-character suffix', () => {
    for (const { object } of objects) {
      expect(object.metadata.name).toMatch(DNS_LABEL);
      if (object.kind === 'CronJob') expect(object.metadata.name.length).toBeLessThanOrEqual(52);
    }
  });

  it('every secretKeyRef names a Secret and a key defined here', () => {
    const secrets = new Map(
      objects
        .filter(({ object }) => object.kind === 'Secret')
        .map(({ object }) => [object.metadata.name, new Set(Object.keys({ ...(object.data as object), ...(object.stringData as object) }))]),
    );
    const refs = objects
      .filter(({ object }) => ['CronJob', 'Job', 'Deployment'].includes(object.kind))
      .flatMap(({ object }) => [
        ...(podSpecOf(object).containers as any[]).flatMap((c) => ((c.env ?? []) as any[]).map((e) => e.valueFrom?.secretKeyRef)),
        // A Secret mounted as files (the example job's URL): each item names a key.
        ...((podSpecOf(object).volumes ?? []) as any[])
          .filter((v) => v.secret)
          .flatMap((v) => (v.secret.items as any[]).map((i) => ({ name: v.secret.secretName, key: i.key }))),
      ])
      .filter(Boolean);
    expect(refs.length).toBe(4); // migration, exporter, prune as environment; the example job as a file
    for (const ref of refs) expect(secrets.get(ref.name)?.has(ref.key), `${ref.name}/${ref.key}`).toBe(true);
  });

  it('podFailurePolicy rules name a container of the pod, and need restartPolicy Never', () => {
    for (const { object } of objects.filter(({ object }) => object.kind === 'CronJob')) {
      const jobSpec = (object.spec as any).jobTemplate.spec;
      const pod = podSpecOf(object);
      expect(pod.restartPolicy).toBe('Never');
      const names = (pod.containers as any[]).map((c) => c.name);
      for (const rule of jobSpec.podFailurePolicy?.rules ?? []) {
        if (rule.onExitCodes?.containerName) expect(names).toContain(rule.onExitCodes.containerName);
      }
    }
  });

  it('the exporter Service selects the Deployment\'s pods and targets its metrics port', () => {
    const deployment = objects.find(({ object }) => object.kind === 'Deployment')!.object as any;
    const service = objects.find(({ object }) => object.kind === 'Service')!.object as any;
    const podLabels = deployment.spec.template.metadata.labels;
    expect(podLabels).toMatchObject(deployment.spec.selector.matchLabels);
    expect(podLabels).toMatchObject(service.spec.selector);
    const ports = deployment.spec.template.spec.containers.flatMap((c: any) => c.ports ?? []);
    for (const p of service.spec.ports) expect(ports.map((x: any) => x.name)).toContain(p.targetPort);
  });

  it('kustomization.yaml lists exactly the manifest files', () => {
    const k = readYaml<{ apiVersion: string; kind: string; resources: string[] }>(`${PLAIN_DIR}/kustomization.yaml`);
    expect(k.apiVersion).toBe('kustomize.config.k8s.io/v1beta1');
    expect(k.kind).toBe('Kustomization');
    expect([...k.resources].sort()).toEqual(plainManifestFiles());
  });

  const kubectl = findTool('kubectl', 'LEASEJOB_KUBECTL', ['version', '--client']);
  if (!kubectl) console.log('skipping `kubectl kustomize deploy/kubernetes`: no kubectl on PATH (set LEASEJOB_KUBECTL to use one)');
  it.skipIf(!kubectl)('`kubectl kustomize deploy/kubernetes` builds the same objects, offline', () => {
    const r = spawnSync(kubectl!, ['kustomize', PLAIN_DIR], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    const built = parseDocuments(r.stdout, 'kubectl kustomize') as K8sObject[];
    const key = (o: K8sObject): string => `${o.kind}/${o.metadata.name}`;
    const byKey = (list: K8sObject[]): Record<string, K8sObject> => Object.fromEntries(list.map((o) => [key(o), o]));
    expect(byKey(built)).toEqual(byKey(objects.map(({ object }) => object)));
  });
});
