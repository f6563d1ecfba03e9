// Which values paths the chart's templates read, found without Helm: a small scan of the Go
// template actions that follows how `.` and variables are bound.
//
// Understood: `.Values.a.b` and `$.Values.a.b` anywhere (also `.root.Values...` in helpers
// called with a dict); `with .Values.x` / `range .Values.x` blocks, inside which `.field` is
// `x.field` (`x[].field` for a list); variables bound to a values path (`$r := .Values.x`,
// `range $e := .Values.jobs`), whose `$r.field` is `x.field`; `$j`, the job merged over
// jobDefaults in cronjob.yaml, is reported as `$job.field` for the caller to resolve.
// Skipped: fields reached through `index`/`get` with computed keys, `.` inside blocks over
// anything but values (`with (merge ...)`, `range regexFindAll ...`), variables bound to other
// expressions, and text inside quoted or backquoted strings (the PrometheusRule's own
// `{{ $labels.job }}`).

export interface ValuesRef {
  file: string;
  line: number;
  /** Dotted path; `[]` marks a list element: `jobs[].name`. `$job.` prefix: a merged job's key. */
  path: string;
}

interface Action {
  text: string;
  line: number;
}

/** The `{{ ... }}` actions of a template, skipping strings so `{{` inside one does not count. */
export function actionsOf(text: string): Action[] {
  const out: Action[] = [];
  let i = 0;
  while ((i = text.indexOf('{{', i)) !== -1) {
    const start = i + 2;
    let j = start;
    let quote: string | undefined;
    for (; j < text.length; j++) {
      const c = text[j]!;
      if (quote) {
        if (c === '\\' && quote === '"') j++;
        else if (c === quote) quote = undefined;
      } else if (c === '"' || c === '`') {
        quote = c;
      } else if (c === '}' && text[j + 1] === '}') {
        break;
      }
    }
    const body = text.slice(start, j).trim().replace(/^-\s+/, '').replace(/\s+-$/, '').trim();
    out.push({ text: body, line: text.slice(0, i).split('\n').length });
    i = j + 2;
  }
  return out;
}

/** The action without its string literals and comments. */
function code(action: string): string {
  if (action.startsWith('/*')) return '';
  return action.replace(/"(?:[^"\\]|\\.)*"|`[^`]*`/g, '""');
}

const VALUES_PATH = /(?:^|[\s(|$.\w])\.Values((?:\.[A-Za-z_]\w*)+)/g;
const VAR_FIELD = /(\$[A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)/g;
const BARE_FIELD = /(?<![\w$)\]."])((?:\.[A-Za-z_]\w*)+)/g;

function valuesPaths(src: string): string[] {
  return [...src.matchAll(VALUES_PATH)].map((m) => m[1]!.slice(1));
}

export function valuesRefs(file: string, text: string, opts: { mergedJobVar?: string } = {}): ValuesRef[] {
  const refs: ValuesRef[] = [];
  const vars = new Map<string, string>();
  // Each open block: the values path `.` stands for inside it, null when unknown or the root.
  const stack: Array<string | null | 'same'> = [];
  const dot = (): string | null => {
    for (let k = stack.length - 1; k >= 0; k--) if (stack[k] !== 'same') return stack[k] as string | null;
    return null;
  };

  for (const { text: raw, line } of actionsOf(text)) {
    const src = code(raw);
    if (src === '') continue;
    const keyword = /^(if|else|with|range|define|block|end)\b/.exec(src)?.[1];
    if (keyword === 'end') {
      stack.pop();
      continue;
    }
    const binding = /^(?:range\s+)?(?:\$\w+\s*,\s*)?(\$[A-Za-z_]\w*)\s*:?=\s*(.*)$/s.exec(src);
    let expr = src;
    if (binding) {
      const [, name, rhs] = binding as unknown as [string, string, string];
      expr = rhs;
      const bound = valuesPaths(rhs)[0];
      const isRange = src.startsWith('range');
      if (name === opts.mergedJobVar) vars.set(name, '$job');
      else if (bound !== undefined) vars.set(name, isRange ? `${bound}[]` : bound);
      else if (!isRange && /^\$[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$/.test(rhs.trim()) && vars.has(rhs.trim().split('.')[0]!)) {
        const [v, ...fields] = rhs.trim().split('.');
        vars.set(name, [vars.get(v!)!, ...fields].join('.'));
      } else vars.delete(name);
    }

    // References in this action; naming a whole value (`$r := .Values.x`) is not a use of it.
    const aliasOnly = binding !== null && /^(deepCopy\s+)?\$?\.Values(\.[A-Za-z_]\w*)+$/.test(expr.trim());
    if (!aliasOnly) for (const p of valuesPaths(expr)) refs.push({ file, line, path: p });
    for (const m of expr.matchAll(VAR_FIELD)) {
      const base = vars.get(m[1]!);
      if (base !== undefined) refs.push({ file, line, path: `${base}${m[2]}` });
    }
    const here = dot();
    if (here !== null) {
      for (const m of expr.replace(VALUES_PATH, ' ').replace(VAR_FIELD, ' ').matchAll(BARE_FIELD)) {
        refs.push({ file, line, path: `${here}${m[1]}` });
      }
    }

    if (keyword === 'with' || keyword === 'range') {
      const target = expr.replace(/^(with|range)\s+/, '').trim();
      const direct = /^\$?\.Values((?:\.[A-Za-z_]\w*)+)$/.exec(target);
      const boundList = binding && keyword === 'range' ? /^\$?\.Values((?:\.[A-Za-z_]\w*)+)$/.exec(binding[2]!.trim()) : null;
      if (boundList) stack.push(`${boundList[1]!.slice(1)}[]`);
      else if (binding && keyword === 'range') stack.push(null);
      else if (direct) stack.push(keyword === 'range' ? `${direct[1]!.slice(1)}[]` : direct[1]!.slice(1));
      else stack.push(null);
    } else if (keyword === 'define' || keyword === 'block') {
      stack.push(null);
    } else if (keyword === 'if') {
      stack.push('same');
    }
  }
  return refs;
}

type Tree = unknown;

/** Whether a dotted path (`jobs[].name`) exists in the values tree; a list matches when any element has it. */
export function pathExists(tree: Tree, path: string): boolean {
  const parts = path.split('.').flatMap((p) => (p.endsWith('[]') ? [p.slice(0, -2), '[]'] : [p]));
  const walk = (node: Tree, i: number): boolean => {
    if (i === parts.length) return true;
    const part = parts[i]!;
    if (part === '[]') return Array.isArray(node) && node.some((el) => walk(el, i + 1));
    if (node === null || typeof node !== 'object' || Array.isArray(node)) return false;
    return Object.prototype.hasOwnProperty.call(node, part) && walk((node as Record<string, Tree>)[part], i + 1);
  };
  return walk(tree, 0);
}
