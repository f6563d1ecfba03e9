// Builds the CLI bundle (dist/leasejob.cjs), the single executable's (dist/leasejob-single-file.cjs)
// and the code-cache loader (dist/compile-cache.cjs)
// from tsc's output: `npm run bundle`, part of `npm run build`. Plain JavaScript, run by Node
// after tsc; it is not compiled or shipped.
//
// Besides bundling, it keeps Node built-ins off the start of every command that the bundled
// libraries load at import time but leasejob never uses, or uses only on a rarer path: every
// `run` would pay for loading them before its child starts (`npm run bench -- --only
// instructions` counts it; docs/performance.md). Each change below is an exact
// text replacement in one pinned dependency's file; if a dependency's text changes on upgrade,
// the build fails naming the file, rather than quietly loading the module again.
// test/integration/startup-modules.test.ts checks that `run` loads none of them.
import { build } from 'esbuild';
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

const PINO_TRANSPORT_STUB = JSON.stringify(
  fileURLToPath(new URL('./bundle-stubs/pino-transport.cjs', import.meta.url)),
);

/** What a start must not load, and why leasejob does not need it. */
const PATCHES = [
  {
    // pino's transports run in worker threads (thread-stream, worker_threads, assert, module).
    // leasejob logs synchronously to stderr and never passes `transport`.
    file: 'node_modules/pino/pino.js',
    from: "module.exports.transport = require('./lib/transport')",
    to: `module.exports.transport = require(${PINO_TRANSPORT_STUB})`,
  },
  {
    file: 'node_modules/pino/lib/tools.js',
    from: "const transport = require('./transport')",
    to: `const transport = require(${PINO_TRANSPORT_STUB})`,
  },
  {
    // Only asks whether an async destination needs an exit hook; leasejob's logger never runs
    // in a worker thread.
    file: 'node_modules/pino/lib/tools.js',
    from: "const { isMainThread } = require('worker_threads')",
    to: 'const isMainThread = true',
  },
  {
    // One argument check, not worth loading `assert` for.
    file: 'node_modules/sonic-boom/index.js',
    from: "const assert = require('assert')",
    to: 'const assert = (ok, message) => { if (!ok) throw new Error(message) }',
  },
  {
    // Web Crypto, needed only for MD5 and SCRAM authentication: loaded on first use.
    file: 'node_modules/pg/lib/crypto/utils.js',
    from: "const nodeCrypto = require('crypto')",
    to: "let loaded; const nodeCrypto = new Proxy({}, { get: (_, key) => (loaded ??= require('crypto'))[key] })",
  },
  {
    // Also read at import time: Web Crypto and its SubtleCrypto, now each member at first use.
    file: 'node_modules/pg/lib/crypto/utils.js',
    from: 'const webCrypto = nodeCrypto.webcrypto || globalThis.crypto',
    to: `const lazily = (get) => new Proxy({}, { get: (_, key) => { const o = get(); const v = o[key]; return typeof v === 'function' ? v.bind(o) : v } }); const webCrypto = lazily(() => nodeCrypto.webcrypto || globalThis.crypto)`,
  },
  {
    file: 'node_modules/pg/lib/crypto/utils.js',
    from: 'const subtleCrypto = webCrypto.subtle',
    to: 'const subtleCrypto = lazily(() => (nodeCrypto.webcrypto || globalThis.crypto).subtle)',
  },
  {
    // Used only for pg-native's libpq configuration; net looks names up by itself.
    file: 'node_modules/pg/lib/connection-parameters.js',
    from: "const dns = require('dns')",
    to: "const dns = { lookup: (...args) => require('dns').lookup(...args) }",
  },
];

const applied = new Set();

/** @type {import('esbuild').Plugin} */
const patchPlugin = {
  name: 'leasejob-patches',
  setup(b) {
    const files = [...new Set(PATCHES.map((p) => p.file))];
    const filter = new RegExp(`(${files.map((f) => f.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')).join('|')})$`);
    b.onLoad({ filter }, async (args) => {
      let text = await readFile(args.path, 'utf8');
      for (const [i, p] of PATCHES.entries()) {
        if (!args.path.endsWith(p.file)) continue;
        if (!text.includes(p.from)) continue;
        text = text.replace(p.from, p.to);
        applied.add(i);
      }
      return { contents: text, loader: 'js' };
    });
  },
};

const OTEL_SDK = [
  '@opentelemetry/sdk-trace',
  '@opentelemetry/resources',
  '@opentelemetry/exporter-trace-otlp-http',
  '@opentelemetry/exporter-trace-otlp-proto',
];

/** The CLI as one CommonJS file, built in memory: `options` says which entry and for what. */
const bundleCli = (options) =>
  build({
    write: false,
    bundle: true,
    format: 'cjs',
    platform: 'node',
    minifyWhitespace: true,
    minifySyntax: true,
    legalComments: 'none',
    charset: 'ascii',
    // The OpenTelemetry SDK is loaded from node_modules, and only when OTEL_* asks for an export
    // (src/cli/trace-spans.ts): bundled, it would add ~0.5 MB to every start's parse. The single
    // executable has no node_modules: it carries the export as a bundle of its own
    // (dist/trace-export.cjs, below), an asset read only then. (@opentelemetry/api stays
    // bundled: prom-client requires it.)
    external: ['pg-native', 'better-sqlite3', ...OTEL_SDK],
    logLevel: 'warning',
    // pg's Cloudflare probe builds a fetch Response at import (loading undici): compiled out.
    define: { Response: 'undefined', 'import.meta.url': '__leasejobUrl' },
    banner: { js: "var __leasejobUrl = require('node:url').pathToFileURL(__filename).href;" },
    plugins: [patchPlugin],
    ...options,
    alias: { luxon: './node_modules/luxon/build/node/luxon.js', ...options.alias },
  });

// Written only once every replacement has applied.
const bundled = [
  // For npm: loaded by bin/leasejob.js through the code cache, on Node >= 20.
  await bundleCli({ entryPoints: ['dist/cli/main.js'], target: 'node20', outfile: 'dist/leasejob.cjs' }),
  // The single executable's main script (scripts/single-file.mjs), for the Node it pins: no
  // native module, so the embedded store runs on node:sqlite in better-sqlite3's place.
  await bundleCli({
    entryPoints: ['dist/cli/single-file.js'],
    target: 'node24',
    outfile: 'dist/leasejob-single-file.cjs',
    alias: { 'better-sqlite3': './dist/store/sqlite/node-sqlite.js' },
  }),
];

// The trace export with the SDK, for the single executable (an asset of it, scripts/single-file.mjs,
// compiled only when OTEL_* asks: src/cli/single-file.ts). Not in the npm package, which loads the
// SDK from node_modules.
const traceExport = await build({
  write: false,
  entryPoints: ['dist/cli/trace-export.js'],
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node24',
  // The SDK loads http/https by import(): a require here, since the file is compiled as a
  // script (src/cli/single-file.ts), where import() has no loader.
  supported: { 'dynamic-import': false },
  minifyWhitespace: true,
  minifySyntax: true,
  legalComments: 'none',
  charset: 'ascii',
  logLevel: 'warning',
  outfile: 'dist/trace-export.cjs',
});
bundled.push(traceExport);

const missed = PATCHES.filter((_, i) => !applied.has(i));
if (missed.length > 0) {
  for (const p of missed)
    process.stderr.write(
      `bundle: ${p.file} no longer contains ${JSON.stringify(p.from)}; update scripts/bundle.mjs for this version\n`,
    );
  process.exit(1);
}
for (const file of bundled.flatMap((b) => b.outputFiles)) await writeFile(file.path, file.contents);

// The single executable's main script: the guard when started as one, else it loads
// dist/leasejob-single-file.cjs, an asset there.
await build({
  entryPoints: ['dist/cli/single-file-main.js'],
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node24',
  outfile: 'dist/single-file-loader.cjs',
  logLevel: 'warning',
});

// The guard leasejob starts for each child (src/lease/guard.ts): Node built-ins only, CommonJS
// so that its start loads one small file.
await build({
  entryPoints: ['dist/cli/guard-main.js'],
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  outfile: 'dist/guard.cjs',
  logLevel: 'warning',
});

await build({
  // Bundled with what it imports of ours (the command names, the reach levels): it loads
  // before the CLI bundle, and Node 20 cannot require tsc's ES modules.
  entryPoints: ['dist/startup/compile-cache.js'],
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  outfile: 'dist/compile-cache.cjs',
  logLevel: 'warning',
});
