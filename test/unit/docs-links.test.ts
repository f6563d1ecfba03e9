// Every relative link in README.md, CHANGELOG.md and docs/ points at a file that exists and, with
// a #fragment, at a heading that page has: the reference is split over many pages now.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/wait.js';

function markdownFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = path.join(dir, f);
    if (statSync(p).isDirectory()) return markdownFiles(p);
    return f.endsWith('.md') ? [p] : [];
  });
}

/** GitHub's heading anchors: lowercase, punctuation dropped, spaces to hyphens. */
function anchorsOf(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  let fenced = false;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const m = !fenced && /^#{1,6} (.*)$/.exec(line);
    if (!m) continue;
    const base = m[1]!
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

const pages = [
  path.join(ROOT, 'README.md'),
  path.join(ROOT, 'CHANGELOG.md'),
  ...markdownFiles(path.join(ROOT, 'docs')),
];

describe('documentation links', () => {
  it.each(pages.map((p) => [path.relative(ROOT, p), p]))('%s: every relative link resolves', (_name, page) => {
    const broken: string[] = [];
    let fenced = false;
    for (const line of readFileSync(page, 'utf8').split('\n')) {
      if (line.startsWith('```')) fenced = !fenced;
      if (fenced) continue;
      for (const m of line.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1]!;
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
        const [file, fragment] = target.split('#') as [string, string | undefined];
        const resolved = file === '' ? page : path.resolve(path.dirname(page), file);
        if (!existsSync(resolved)) {
          broken.push(`${target}: no such file`);
          continue;
        }
        if (fragment && resolved.endsWith('.md') && !anchorsOf(resolved).has(fragment))
          broken.push(`${target}: no such heading`);
      }
    }
    expect(broken).toEqual([]);
  });
});
