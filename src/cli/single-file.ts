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
watchOutput();
// The SEA gives the executable's path as argv[1] too, as `node script` would.
void main(process.argv).then(exitWhenWritten);
