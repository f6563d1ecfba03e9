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
// arm64 is built without the code cache (V8 writes that cache only on the machine it runs on);
// it starts slower, and is untested here.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
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
/** The blob's builder and the file run with it (see execArgv below). */
const HASH_SEED = '--hash-seed=20240101';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const BUNDLE = path.join(ROOT, 'dist', 'leasejob-single-file.cjs');

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

export function buildSingleFile({ arch = 'x64', out } = {}) {
  if (!(arch in INTEGRITY)) throw new Error(`--arch: x64 or arm64, got ${JSON.stringify(arch)}`);
  if (!existsSync(BUNDLE)) throw new Error(`${BUNDLE} is missing: run \`npm run build\` first`);
  const output = path.resolve(out ?? path.join(ROOT, 'dist', 'single-file', `leasejob-linux-${arch}`));
  const work = path.join(ROOT, 'dist', 'single-file', `work-${arch}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const node = pinnedNode(arch);
  // The blob is made by a Node of the same version; the code cache only by the same binary.
  const builder = arch === os.arch() ? node : pinnedNode(os.arch());
  const { version } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  const files = packageFiles();
  writeFileSync(path.join(work, 'manifest.json'), JSON.stringify({ version, files }));
  const config = {
    main: BUNDLE,
    output: path.join(work, 'leasejob.blob'),
    disableExperimentalSEAWarning: true,
    useSnapshot: false,
    useCodeCache: arch === os.arch(),
    // V8 seeds its hash tables at random, which makes the code cache differ at every build; a
    // fixed seed makes it the same. V8 accepts a cache only from a start with the same flags,
    // so the file starts with the same seed (a hash-flooding guard that matters for servers
    // hashing strangers' keys; the exporter takes only the few headers of a scrape).
    execArgv: [HASH_SEED],
    assets: {
      'manifest.json': path.join(work, 'manifest.json'),
      ...Object.fromEntries(files.map((f) => [f, path.join(ROOT, f)])),
    },
  };
  writeFileSync(path.join(work, 'sea-config.json'), JSON.stringify(config, null, 2));
  execFileSync(builder, [HASH_SEED, '--experimental-sea-config', 'sea-config.json'], {
    cwd: work,
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, // no NODE_OPTIONS: the blob records none
  });
  mkdirSync(path.dirname(output), { recursive: true });
  const partial = `${output}.partial`;
  copyFileSync(node, partial);
  chmodSync(partial, 0o755);
  return inject(partial, 'NODE_SEA_BLOB', readFileSync(config.output), { sentinelFuse: SEA_FUSE }).then(() => {
    execFileSync('mv', ['-f', partial, output]);
    rmSync(work, { recursive: true, force: true });
    return { file: output, sha256: sha('sha256', output).digest('hex') };
  });
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
