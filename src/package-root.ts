// Where the package's own files (package.json, sql/) are, whether this code runs from dist/
// (tsc output, the library) or from dist/leasejob.cjs (the CLI bundle).
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

let found: { root: string; version: string } | undefined;

function manifest(): { root: string; version: string } {
  if (found !== undefined) return found;
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    const file = path.join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version: string };
      if (pkg.name === 'leasejob') {
        found = { root: dir, version: pkg.version };
        return found;
      }
    }
    if (path.dirname(dir) === dir)
      throw new Error('leasejob: cannot find its package.json above ' + fileURLToPath(import.meta.url));
  }
}

export function packageRoot(): string {
  return manifest().root;
}

export function packageVersion(): string {
  return manifest().version;
}
