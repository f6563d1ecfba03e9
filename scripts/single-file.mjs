// `npm run single-file [-- --arch x64|arm64] [-- --out FILE]` (default dist/single-file/leasejob-linux-<arch>): leasejob as one executable for
// Linux that needs nothing but glibc (no Node, no node_modules, no npm): Node's official binary
// of a pinned version with the CLI bundle (dist/leasejob-single-file.cjs, `npm run build`), its
// V8 code cache and the package's SQL files injected as a single-executable-application blob.
//
// Reproducible: the Node binary is the npm registry's `node-linux-<arch>` package at the
// version pinned below, checked against the pinned sha512 before use (a changed tarball stops
// the build), fetched with `npm pack` into a cache directory (LEASEJOB_NODE_CACHE, else
// ~/.cache/leasejob/node): it is never installed, so nothing puts a second `node` on PATH.
// The same checkout builds the same bytes; the build prints the file's sha256.
//
// arm64 is built without the code cache (it is written by running the file); it starts slower,
// and is untested here.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { inject } from 'postject';

/** The Node inside the file: 24 LTS, whose node:sqlite carries the embedded store. */
export const NODE_VERSION = '24.22.3';
/** The registry's integrity of each `node-linux-<arch>@NODE_VERSION` tarball. */
const INTEGRITY = {
  x64: 'sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==',
  arm64: 'sha512-IZx0J52/1NDwAsY2iyWR9nlPIYuYviTWetjj8+ElvYQh2+XRhLfCfkbFEF/2O5vGI2hcUbyPNHV+nz342FbJXw==',
};
/** Node's SEA fuse: postject flips it so the binary looks for its blob. */
const SEA_FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';
/**
 * What the file starts V8 with, so that the code cache the build writes is the same bytes at
 * every build: V8 seeds its hash tables at random, and ages bytecode at garbage collections,
 * whose timing varies (a flag bit of the cache). V8 takes a cache only from a start with the
 * same flags, so the file runs with them too: a fixed hash seed (a hash-flooding guard that
 * matters for servers hashing strangers' keys; the exporter reads only a scrape's few
 * headers), and bytecode kept once compiled (a short-lived CLI flushes none anyway).
 */
const V8_FLAGS = ['--hash-seed=20240101', '--no-flush-bytecode'];

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const BUNDLE = path.join(ROOT, 'dist', 'leasejob-single-file.cjs');
const LOADER = path.join(ROOT, 'dist', 'single-file-loader.cjs');
/** The trace export with the OpenTelemetry SDK, an asset compiled only when OTEL_* asks for an export. */
const TRACE_EXPORT = path.join(ROOT, 'dist', 'trace-export.cjs');

const sha = (algorithm, file) => createHash(algorithm).update(readFileSync(file));

/** The pinned Node binary for `arch`, fetched once into the cache and checked every time. */
export function pinnedNode(
  arch,
  cache = process.env.LEASEJOB_NODE_CACHE || path.join(os.homedir(), '.cache', 'leasejob', 'node'),
) {
  const dir = path.join(cache, `${NODE_VERSION}-${arch}`);
  const tarball = path.join(dir, `node-linux-${arch}-${NODE_VERSION}.tgz`);
  if (!existsSync(tarball)) {
    mkdirSync(dir, { recursive: true });
    execFileSync('npm', ['pack', `node-linux-${arch}@${NODE_VERSION}`, '--pack-destination', dir, '--silent'], {
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  }
  const integrity = `sha512-${sha('sha512', tarball).digest('base64')}`;
  if (integrity !== INTEGRITY[arch]) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `node-linux-${arch}@${NODE_VERSION}: the tarball's checksum ${integrity} is not the pinned ${INTEGRITY[arch]}; removed it`,
    );
  }
  const node = path.join(dir, 'package', 'bin', 'node');
  if (!existsSync(node)) execFileSync('tar', ['-xzf', tarball, '-C', dir, 'package/bin/node']);
  return node;
}

/** The package's files the CLI reads at run time, as asset names relative to the package root. */
function packageFiles() {
  const sqlFiles = (dir) =>
    readdirSync(path.join(ROOT, dir))
      .filter((f) => f.endsWith('.sql'))
      .sort()
      .map((f) => `${dir}/${f}`);
  return [...sqlFiles('sql'), ...sqlFiles('sql/sqlite')];
}

/**
 * What the build's priming start runs, in one process, before V8's code cache is written: a
 * whole run on the embedded store (a state file in the build's work directory), then a run
 * against PostgreSQL on a closed port, which stops at exit 69 once the driver has connected as
 * far as it can. Between them they compile what a run calls on either store.
 */
const PRIME_RUNS = (work) => [
  ['run', '--state-file', path.join(work, 'prime.db'), '--name', 'prime', '--window', 'prime', '--', 'true'],
  ['run', '--database-url', 'postgres://prime@127.0.0.1:1/prime', '--name', 'prime', '--window', 'prime', '--', 'true'],
];
const PRIME_CODES = [0, 69];

/** The blob for `config` (its assets), made by `builder`, injected into a copy of `node` at `file`. */
async function injectBlob(builder, node, work, config, file) {
  writeFileSync(path.join(work, 'sea-config.json'), JSON.stringify(config, null, 2));
  const made = spawnSync(builder, [...V8_FLAGS, '--experimental-sea-config', 'sea-config.json'], {
    cwd: work,
    encoding: 'utf8',
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, // no NODE_OPTIONS: the blob records none
  });
  // Quiet unless something is wrong: Node's "Wrote single executable preparation blob" line is left out.
  const said = `${made.stdout ?? ''}${made.stderr ?? ''}`
    .split('\n')
    .filter((line) => line.trim() !== '' && !line.startsWith('Wrote single executable preparation blob to '));
  if (made.status !== 0)
    throw new Error(
      `${builder} --experimental-sea-config: ${made.error?.message ?? `exit ${made.status}`}\n${said.join('\n')}`,
    );
  if (said.length > 0) process.stderr.write(`${said.join('\n')}\n`);
  copyFileSync(node, file);
  chmodSync(file, 0o755);
  await quietly(() => inject(file, 'NODE_SEA_BLOB', readFileSync(config.output), { sentinelFuse: SEA_FUSE }));
}

/**
 * What postject's LIEF says of every Node binary, and harmlessly: the ELF's `.note.*` sections
 * have no names in its string table. The build stays quiet unless something is wrong: any
 * other line postject prints still reaches stderr.
 */
const POSTJECT_NOISE = /^(warning: )?Can't find string offset for section name '\.note(\.\d+)?'$/;

/** `fn()` with postject's known noise (printed through console.warn and console.log) left out. */
async function quietly(fn) {
  const { warn, log } = console;
  const filter =
    (write) =>
    (...args) => {
      const text = args.map(String).join(' ');
      const kept = text.split('\n').filter((line) => !POSTJECT_NOISE.test(line.trim()));
      if (kept.some((line) => line.trim() !== '')) write(kept.join('\n'));
    };
  console.warn = filter((t) => process.stderr.write(`${t}\n`));
  console.log = filter((t) => process.stdout.write(`${t}\n`));
  try {
    return await fn();
  } finally {
    Object.assign(console, { warn, log });
  }
}

/**
 * Two passes: a file without the bundle's code cache, run once (PRIME_RUNS), which writes the
 * cache of what it compiled; then the file with that cache as an asset. A file for another
 * architecture cannot be run here: it has no cache.
 */
export async function buildSingleFile({ arch = 'x64', out } = {}) {
  if (!(arch in INTEGRITY)) throw new Error(`--arch: x64 or arm64, got ${JSON.stringify(arch)}`);
  for (const f of [BUNDLE, LOADER, TRACE_EXPORT])
    if (!existsSync(f)) throw new Error(`${f} is missing: run \`npm run build\` first`);
  const output = path.resolve(out ?? path.join(ROOT, 'dist', 'single-file', `leasejob-linux-${arch}`));
  mkdirSync(path.join(ROOT, 'dist', 'single-file'), { recursive: true });
  const work = mkdtempSync(path.join(ROOT, 'dist', 'single-file', `work-${arch}-`));
  const node = pinnedNode(arch);
  // The blob is made by a Node of the same version.
  const native = arch === os.arch();
  const builder = native ? node : pinnedNode(os.arch());
  const { version } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  const files = packageFiles();
  writeFileSync(path.join(work, 'manifest.json'), JSON.stringify({ version, files }));
  const config = {
    main: LOADER,
    output: path.join(work, 'leasejob.blob'),
    disableExperimentalSEAWarning: true,
    useSnapshot: false,
    useCodeCache: false, // the loader is a few lines; the bundle's cache is the asset below
    execArgv: V8_FLAGS,
    assets: {
      'leasejob.cjs': BUNDLE,
      'trace-export.cjs': TRACE_EXPORT,
      'manifest.json': path.join(work, 'manifest.json'),
      ...Object.fromEntries(files.map((f) => [f, path.join(ROOT, f)])),
    },
  };
  mkdirSync(path.dirname(output), { recursive: true });
  const partial = `${output}.${process.pid}.partial`;
  await injectBlob(builder, node, work, config, partial);
  if (native) {
    const cache = path.join(work, 'leasejob.cache');
    const primed = spawnSync(partial, [], {
      cwd: work,
      encoding: 'utf8',
      env: {
        PATH: '/usr/bin:/bin',
        HOME: work,
        LEASEJOB_LOG_LEVEL: 'fatal',
        LEASEJOB_SINGLE_FILE_PRIME: cache,
        LEASEJOB_SINGLE_FILE_PRIME_RUNS: JSON.stringify(PRIME_RUNS(work)),
      },
    });
    if (primed.stdout.trim() !== JSON.stringify(PRIME_CODES) || !existsSync(cache))
      throw new Error(
        `the priming start answered ${primed.stdout.trim() || primed.status}, not ${PRIME_CODES}: ${primed.stderr}`,
      );
    config.assets['leasejob.cache'] = cache;
    await injectBlob(builder, node, work, config, partial);
  }
  execFileSync('mv', ['-f', partial, output]);
  rmSync(work, { recursive: true, force: true });
  return { file: output, sha256: sha('sha256', output).digest('hex') };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { arch: { type: 'string', default: 'x64' }, out: { type: 'string' } } });
  try {
    const { file, sha256 } = await buildSingleFile(values);
    process.stdout.write(`${file}\nsha256 ${sha256}\n`);
  } catch (err) {
    process.stderr.write(`single-file: ${err.message}\n`);
    process.exit(1);
  }
}
