// The single executable's main script (scripts/single-file.mjs): loads the CLI bundle, an
// asset of the executable, through V8's code cache, another asset, as the npm entry does through
// compile-cache.ts. Node's own SEA code cache (useCodeCache) holds only what compiling the
// bundle's top level compiles; this one was written after a whole start (the build runs the
// executable once with LEASEJOB_SINGLE_FILE_PRIME=<file>), so the functions a start calls are
// read back instead of compiled. V8 rejects a cache made by another binary, flags or source:
// then the start compiles, as without one.
import { writeFileSync } from 'node:fs';
import { getAsset } from 'node:sea';
import path from 'node:path';
import { Script } from 'node:vm';

/**
 * UTF-8, as Node reads a module file: esbuild's --charset=ascii escapes strings, but not the raw
 * text of a tagged template (the status page's `markup`...``), which keeps its `·` and `←` as
 * UTF-8 bytes; read as latin1 they became `Â·` and `â†`.
 */
const source = getAsset('leasejob.cjs', 'utf8');
let cachedData: Buffer | undefined;
try {
  cachedData = Buffer.from(getAsset('leasejob.cache'));
} catch {
  cachedData = undefined; // the build's first pass, which writes it
}
// The CommonJS wrapper, as Node's own loader puts around a module (and compile-cache.ts).
const wrapped = `(function (exports, require, module, __filename, __dirname) { ${source}\n});`;
const script = new Script(wrapped, { filename: 'leasejob.cjs', ...(cachedData ? { cachedData } : {}) });

// For the tests and the bench: whether V8 took the cache.
if (process.env.LEASEJOB_SINGLE_FILE_CACHE === 'report')
  process.stderr.write(
    `code cache: ${cachedData === undefined ? 'none' : script.cachedDataRejected ? 'rejected' : 'used'}\n`,
  );
const prime = process.env.LEASEJOB_SINGLE_FILE_PRIME;
if (prime) process.on('exit', () => writeFileSync(prime, script.createCachedData()));

const mod = { exports: {} };
(script.runInThisContext() as (...args: unknown[]) => void).call(
  mod.exports,
  mod.exports,
  require,
  mod,
  process.execPath,
  path.dirname(process.execPath),
);
