// Where the package's own files (package.json, sql/) are, whether this code runs from dist/
// (tsc output, the library) or from dist/leasejob.cjs (the CLI bundle).
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

let root: string | undefined;

export function packageRoot(): string {
  if (root !== undefined) return root;
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    const manifest = path.join(dir, 'package.json');
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'leasejob') {
      root = dir;
      return dir;
    }
    if (path.dirname(dir) === dir) throw new Error('leasejob: cannot find its package.json above ' + fileURLToPath(import.meta.url));
  }
}

export function packageVersion(): string {
  return (JSON.parse(readFileSync(path.join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;
}
