// The single executable's entry (scripts/single-file.mjs builds it): Node, this bundle and the
// package's SQL files in one file that needs nothing but glibc. The package's files are SEA
// assets, read on demand; the embedded store runs on node:sqlite (store/sqlite/node-sqlite.ts,
// put in better-sqlite3's place by the build); V8's code cache for the bundle is inside the
// file too (the SEA config's useCodeCache), so no cache directory is read or written.
import { getAsset } from 'node:sea';
import { Script } from 'node:vm';
import { exitWhenWritten, main, watchOutput } from './main.js';
import { usePackageAssets } from '../package-root.js';
import { useTraceExporter, type TraceExporter } from './trace-spans.js';

/** Written by the build as the asset `manifest.json`. */
interface Manifest {
  version: string;
  files: string[];
}

const manifest = JSON.parse(getAsset('manifest.json', 'utf8')) as Manifest;
usePackageAssets({ ...manifest, read: (file) => getAsset(file, 'utf8') });
useTraceExporter(async () => loadAssetModule('trace-export.cjs') as TraceExporter);

/**
 * A CommonJS bundle carried as an asset (the trace export with the OpenTelemetry SDK: read and
 * compiled only when OTEL_* asks for an export, so a start without them never parses it). It
 * may require Node's built-ins only: the executable has no node_modules.
 */
function loadAssetModule(name: string): unknown {
  const wrapped = `(function (exports, require, module, __filename, __dirname) { ${getAsset(name, 'utf8')}\n});`;
  const builtin = (id: string): unknown => {
    const m = (process as unknown as { getBuiltinModule(id: string): unknown }).getBuiltinModule(id);
    if (m === undefined) throw Object.assign(new Error(`Cannot find module '${id}'`), { code: 'MODULE_NOT_FOUND' });
    return m;
  };
  const mod = { exports: {} };
  const fn = new Script(wrapped, { filename: name }).runInThisContext() as (...args: unknown[]) => void;
  fn.call(mod.exports, mod.exports, builtin, mod, name, '/');
  return mod.exports;
}
// The build's priming start (scripts/single-file.mjs): the commands it names, one after the
// other in this process, so that the code cache it writes at exit holds what each compiled.
const primeRuns = process.env.LEASEJOB_SINGLE_FILE_PRIME_RUNS;
if (primeRuns === undefined) {
  watchOutput();
  // The SEA gives the executable's path as argv[1] too, as `node script` would.
  void main(process.argv).then(exitWhenWritten);
} else void prime(JSON.parse(primeRuns) as string[][]);

async function prime(runs: string[][]): Promise<void> {
  const codes: number[] = [];
  for (const args of runs) codes.push(await main([process.execPath, process.execPath, ...args]));
  process.stdout.write(`${JSON.stringify(codes)}\n`);
  process.exit(0);
}
