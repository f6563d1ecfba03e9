// The single executable (npm run single-file) for the tests that run it, built once per set of
// inputs and reused: the build takes a minute on a busy machine, and several test files run the
// same bytes. Kept under the system temp dir, keyed by a hash of what goes into it (the bundles,
// the builder, the SQL files, package.json), so an edited source builds a new one. The builder
// writes a partial file and renames it, so two test files building at once both end with a
// whole file.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ROOT } from './wait.js';

/** What the file is made of: a change to any of them is a new file. */
function inputs(): string[] {
  const sql = (dir: string): string[] =>
    readdirSync(path.join(ROOT, dir))
      .filter((f) => f.endsWith('.sql'))
      .sort()
      .map((f) => path.join(dir, f));
  return [
    'dist/leasejob-single-file.cjs',
    'dist/single-file-loader.cjs',
    'dist/trace-export.cjs',
    'scripts/single-file.mjs',
    'package.json',
    ...sql('sql'),
    ...sql('sql/sqlite'),
  ];
}

/** The built file's path, or why it could not be built (the caller skips, saying so). */
export function singleFile(): { file: string; unbuilt?: undefined } | { file?: undefined; unbuilt: string } {
  const hash = createHash('sha256');
  for (const f of inputs()) {
    const file = path.join(ROOT, f);
    if (!existsSync(file)) return { unbuilt: `${f} is missing: run \`npm run build\` first` };
    hash.update(f).update(readFileSync(file));
  }
  const dir = path.join(tmpdir(), 'leasejob-single-file-tests', hash.digest('hex').slice(0, 16));
  const file = path.join(dir, 'leasejob');
  if (existsSync(file)) return { file };
  mkdirSync(dir, { recursive: true });
  const r = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'single-file.mjs'), '--out', file], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 300_000,
  });
  if (r.status === 0 && existsSync(file)) return { file };
  const why = (r.stderr || r.error?.message || '').trim().split('\n').at(-1);
  return { unbuilt: `the single file could not be built (npm run single-file): ${why}` };
}
