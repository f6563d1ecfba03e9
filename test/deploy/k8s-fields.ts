// Kubernetes objects checked the way the API server does: kubernetes-models' OpenAPI validators
// (types, required fields, enums, formats), plus unknown fields, which those validators allow
// but `kubectl apply` (strict field validation) rejects. Field names come from the TypeScript
// interfaces that kubernetes-models generates from the same OpenAPI document.
import { createRequire } from 'node:module';
import ts from 'typescript';
import type { K8sObject } from './deploy-files.js';

const require = createRequire(import.meta.url);

/** `batch/v1` + `CronJob` -> `kubernetes-models/batch/v1/CronJob`; `v1` (core) -> `kubernetes-models/v1/...`. */
export function modelModule(apiVersion: string, kind: string): string {
  return `kubernetes-models/${apiVersion}/${kind}`;
}

/** Schema errors of one object; throws when kubernetes-models has no model for its apiVersion/kind. */
export async function schemaErrors(object: K8sObject): Promise<string[]> {
  const mod = (await import(modelModule(object.apiVersion, object.kind))) as Record<string, new (data: unknown) => { validate(): void }>;
  const Model = mod[object.kind];
  if (!Model) throw new Error(`kubernetes-models has no ${object.kind} in ${object.apiVersion}`);
  try {
    new Model(object).validate();
    return [];
  } catch (err) {
    const details = (err as { details?: Array<{ instancePath: string; message?: string }> }).details;
    return details?.map((d) => `${d.instancePath || '/'} ${d.message ?? ''}`) ?? [(err as Error).message];
  }
}

let checker: { program: ts.Program; types: Map<string, ts.Type> } | undefined;

/** One TypeScript program over the model interfaces of every kind asked for (built once per kind set). */
function interfaceType(apiVersion: string, kind: string): ts.Type {
  const key = `${apiVersion}/${kind}`;
  if (checker?.types.has(key)) return checker.types.get(key)!;
  const kinds = new Set([...(checker?.types.keys() ?? []), key]);
  const virtual = '/__leasejob_k8s_types__.ts';
  const lines = [...kinds].map((k, i) => {
    const slash = k.lastIndexOf('/');
    return `import type { I${k.slice(slash + 1)} as T${i} } from ${JSON.stringify(modelModule(k.slice(0, slash), k.slice(slash + 1)))};\nexport declare const v${i}: T${i};`;
  });
  const source = lines.join('\n');
  const options: ts.CompilerOptions = {
    module: ts.ModuleKind.CommonJS, moduleResolution: ts.ModuleResolutionKind.Node10,
    target: ts.ScriptTarget.ES2022, strict: true, noEmit: true, skipLibCheck: true, types: [],
    baseUrl: process.cwd(),
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (file, lang, ...rest) => (file === virtual ? ts.createSourceFile(file, source, lang) : getSourceFile(file, lang, ...rest));
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (file) => file === virtual || fileExists(file);
  // Resolve the package from this repository's node_modules, wherever vitest runs from.
  const pkgDir = require.resolve('kubernetes-models/package.json').replace(/[/\\]kubernetes-models[/\\]package\.json$/, '');
  host.resolveModuleNames = (names, containing) =>
    names.map((name) => ts.resolveModuleName(name, containing === virtual ? `${pkgDir}/__virtual__.ts` : containing, options, host).resolvedModule);
  const program = ts.createProgram([virtual], options, host);
  const diagnostics = ts.getPreEmitDiagnostics(program).filter((d) => d.file?.fileName === virtual);
  if (diagnostics.length > 0) {
    throw new Error(diagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')).join('\n'));
  }
  const tc = program.getTypeChecker();
  const file = program.getSourceFile(virtual)!;
  const types = new Map<string, ts.Type>();
  const exported = tc.getExportsOfModule(tc.getSymbolAtLocation(file)!);
  [...kinds].forEach((k, i) => {
    const sym = exported.find((s) => s.name === `v${i}`)!;
    types.set(k, tc.getTypeOfSymbol(sym));
  });
  checker = { program, types };
  return types.get(key)!;
}

/** Paths of fields the object has but its Kubernetes type does not (`spec.template.spec.restartPolicyy`). */
export function unknownFields(object: K8sObject): string[] {
  const root = interfaceType(object.apiVersion, object.kind);
  const tc = checker!.program.getTypeChecker();
  const out: string[] = [];

  const walk = (value: unknown, type: ts.Type, at: string): void => {
    if (value === null || typeof value !== 'object') return;
    let t = tc.getNonNullableType(type);
    if (t.isUnion()) {
      // IntOrString and the like are primitives; an object value picks the union's object member.
      const objects = t.types.filter((m) => (m.flags & ts.TypeFlags.Object) !== 0);
      if (objects.length !== 1) return;
      t = objects[0]!;
    }
    if (Array.isArray(value)) {
      const element = tc.isArrayType(t) ? tc.getTypeArguments(t as ts.TypeReference)[0] : undefined;
      if (!element) {
        out.push(`${at} (a list where the type has none)`);
        return;
      }
      value.forEach((v, i) => walk(v, element, `${at}[${i}]`));
      return;
    }
    const index = tc.getIndexInfoOfType(t, ts.IndexKind.String);
    for (const [k, v] of Object.entries(value)) {
      const prop = t.getProperty(k);
      const field = at ? `${at}.${k}` : k;
      if (prop) walk(v, tc.getTypeOfSymbol(prop), field);
      else if (index) walk(v, index.type, field);
      else out.push(field);
    }
  };
  walk(object, root, '');
  return out;
}
