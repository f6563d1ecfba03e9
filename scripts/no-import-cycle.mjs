// ESLint rule: no import circle among the files of src/. The graph is read from the sources
// themselves (relative `import ... from './x.js'`, `export ... from`, `import('./x.js')`, type
// imports included: a circle of types is still a circle for a reader), once per lint run, and a
// file on a circle is reported with the circle. Written here rather than taken from an import
// plugin: src/ has only relative imports of .ts files under .js names, which this reads exactly,
// where a plugin would bring a module resolver (a native one) and its settings for one rule.
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';

const IMPORT = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)'(\.{1,2}\/[^']+)\.js'/g;

/** src/'s files and, for each, the files of src/ it imports. */
function importGraph(src) {
  const graph = new Map();
  for (const f of readdirSync(src, { recursive: true })) {
    if (!f.endsWith('.ts') || f.endsWith('.d.ts')) continue;
    const file = path.join(src, f);
    const text = readFileSync(file, 'utf8');
    const deps = new Set();
    for (const m of text.matchAll(IMPORT)) deps.add(path.resolve(path.dirname(file), `${m[1]}.ts`));
    graph.set(file, deps);
  }
  return graph;
}

/** For each file on a circle, one circle through it (Tarjan's strongly connected components). */
function circles(graph) {
  const index = new Map();
  const low = new Map();
  const stack = [];
  const on = new Set();
  const found = new Map();
  let next = 0;
  const visit = (v) => {
    index.set(v, next);
    low.set(v, next);
    next += 1;
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
    }
    if (low.get(v) !== index.get(v)) return;
    const component = [];
    for (let w; w !== v;) {
      w = stack.pop();
      on.delete(w);
      component.push(w);
    }
    const self = graph.get(v)?.has(v);
    if (component.length > 1 || self) for (const w of component) found.set(w, component);
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

let cached;
/** Read once per process: a lint run sees every file as it is on disk. */
function circlesOf(src) {
  if (cached?.src !== src) cached = { src, found: circles(importGraph(src)) };
  return cached.found;
}

export default {
  meta: {
    type: 'problem',
    docs: { description: 'no import circle among the files of src/' },
    schema: [{ type: 'object', properties: { src: { type: 'string' } }, additionalProperties: false }],
  },
  create(context) {
    const src = context.options[0]?.src ?? path.join(context.cwd, 'src');
    return {
      Program(node) {
        const circle = circlesOf(src).get(path.resolve(context.filename));
        if (!circle) return;
        const names = circle.map((f) => path.relative(src, f)).sort();
        context.report({
          node,
          message: `this file is on an import circle of src/: ${names.join(', ')}; move what they share into a module of its own`,
        });
      },
    };
  },
};
