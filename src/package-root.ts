// Where the package's own files (package.json, sql/) are, whether this code runs from dist/
// (tsc output, the library), from dist/leasejob.cjs (the CLI bundle), or from the single
// executable, which carries them inside itself (scripts/single-file.mjs).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package's files as the single executable carries them: paths relative to the package root. */
export interface PackageAssets {
  version: string;
  files: readonly string[];
  read(file: string): string;
}

/** Where the single executable's files appear to be: no such directory exists on disk. */
const EMBEDDED_ROOT = '/leasejob:embedded';

let found: { root: string; version: string } | undefined;
let assets: PackageAssets | undefined;

/** Called by the single executable's entry before anything reads a package file. */
export function usePackageAssets(embedded: PackageAssets): void {
  assets = embedded;
  found = { root: EMBEDDED_ROOT, version: embedded.version };
}

/** Whether this is the single executable (its files are assets, not on disk). */
export function runsFromAssets(): boolean {
  return assets !== undefined;
}

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

/** Whether this is the single executable (its package files are assets inside it): it has no node_modules. */
export const inSingleFile = (): boolean => assets !== undefined;

export function packageRoot(): string {
  return manifest().root;
}

export function packageVersion(): string {
  return manifest().version;
}

/** The embedded path of `file` relative to the package root, if the single executable carries it. */
function embedded(file: string): string | undefined {
  if (assets === undefined) return undefined;
  const rel = path.relative(EMBEDDED_ROOT, file);
  return rel.startsWith('..') ? undefined : rel;
}

/** The names in a directory of the package (the file system's, or the single executable's). */
export function listPackageDir(dir: string): string[] {
  const rel = embedded(dir);
  if (rel === undefined) return readdirSync(dir);
  const names = assets!.files.filter((f) => path.dirname(f) === rel).map((f) => path.basename(f));
  if (names.length === 0) throw Object.assign(new Error(`ENOENT: no such directory, ${dir}`), { code: 'ENOENT' });
  return names;
}

/** A text file of the package (the file system's, or the single executable's). */
export function readPackageFile(file: string): string {
  const rel = embedded(file);
  return rel === undefined ? readFileSync(file, 'utf8') : assets!.read(rel);
}
