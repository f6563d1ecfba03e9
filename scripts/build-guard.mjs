// `npm run build`'s last step: the native guard (src/native/guard.c) as a static executable per
// architecture, dist/guard/linux-x64/leasejob-guard and dist/guard/linux-arm64/leasejob-guard,
// which the npm package ships prebuilt (no install script, no per-platform package). x64 with
// musl-gcc (Debian's musl-tools), arm64 with aarch64-linux-gnu-gcc -static (gcc-aarch64-linux-gnu);
// on an arm64 machine the other way round. Where a compiler is missing, that architecture is
// skipped with a note and leasejob falls back to the Node guard there (src/lease/guard.ts).
//   node scripts/build-guard.mjs [--out DIR] [--arch x64|arm64 ...] [--require]
// --require: a missing compiler is an error (the Dockerfile, a release).
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const SOURCE = path.join(ROOT, 'src', 'native', 'guard.c');
// -Os: the guard's size is its start's cost (pages mapped); it does nothing hot.
const FLAGS = ['-std=gnu11', '-Os', '-static', '-Wall', '-Wextra', '-Werror', '-s', '-fno-asynchronous-unwind-tables'];

/** The compilers that build a static guard for `arch` on this machine, in the order tried. */
function compilers(arch) {
  const host = os.arch();
  if (arch === 'x64')
    return host === 'x64' ? ['musl-gcc', 'x86_64-linux-musl-gcc'] : ['x86_64-linux-musl-gcc', 'x86_64-linux-gnu-gcc'];
  return host === 'arm64'
    ? ['musl-gcc', 'aarch64-linux-musl-gcc']
    : ['aarch64-linux-musl-gcc', 'aarch64-linux-gnu-gcc'];
}

function have(cmd) {
  try {
    execFileSync(cmd, ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Builds the guard for `arch` into `out`; returns its path, or undefined (with a note) without a compiler. */
export function buildGuard(
  arch,
  out = path.join(ROOT, 'dist', 'guard', `linux-${arch}`, 'leasejob-guard'),
  required = false,
) {
  const cc = compilers(arch).find(have);
  if (cc === undefined) {
    const why = `no compiler for a static linux-${arch} guard (tried ${compilers(arch).join(', ')})`;
    if (required) throw new Error(why);
    rmSync(out, { force: true });
    process.stderr.write(`note: ${why}; leasejob uses the Node guard there\n`);
    return undefined;
  }
  mkdirSync(path.dirname(out), { recursive: true });
  const partial = `${out}.${process.pid}.partial`;
  execFileSync(cc, [...FLAGS, '-o', partial, SOURCE], { stdio: ['ignore', 'inherit', 'inherit'] });
  chmodSync(partial, 0o755);
  renameSync(partial, out);
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: { out: { type: 'string' }, arch: { type: 'string', multiple: true }, require: { type: 'boolean' } },
  });
  for (const arch of values.arch ?? ['x64', 'arm64']) {
    const out = values.out ? path.join(values.out, `linux-${arch}`, 'leasejob-guard') : undefined;
    buildGuard(arch, out, values.require === true);
  }
}
