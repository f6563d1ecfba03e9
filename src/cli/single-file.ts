// The single executable's entry (scripts/single-file.mjs builds it): Node, this bundle and the
// package's SQL files in one file that needs nothing but glibc. The package's files are SEA
// assets, read on demand; the embedded store runs on node:sqlite (store/sqlite/node-sqlite.ts,
// put in better-sqlite3's place by the build); V8's code cache for the bundle is inside the
// file too (the SEA config's useCodeCache), so no cache directory is read or written.
import { getAsset } from 'node:sea';
import { exitWhenWritten, main, watchOutput } from './main.js';
import { usePackageAssets } from '../package-root.js';

/** Written by the build as the asset `manifest.json`. */
interface Manifest {
  version: string;
  files: string[];
}

const manifest = JSON.parse(getAsset('manifest.json', 'utf8')) as Manifest;
usePackageAssets({ ...manifest, read: (file) => getAsset(file, 'utf8') });
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
