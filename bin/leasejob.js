#!/usr/bin/env node
// Entry point: the CLI decides the exit code; this file only exits with it.
// CommonJS (bin/package.json says so), like the bundle it loads: an ES module entry costs
// ~5 ms more to start. The CLI is one esbuild bundle (dist/leasejob.cjs) loaded through V8's
// code cache (src/startup/compile-cache.ts); measured by `npm run bench`.
// The path stays bin/leasejob.js: `npx leasejob` in a checkout links this file once into
// npm's npx cache and never relinks it, so a renamed entry leaves "leasejob: not found".
'use strict';
const path = require('node:path');
const { loadCli } = require('../dist/compile-cache.cjs');

const cli = loadCli(path.join(__dirname, '..', 'dist', 'leasejob.cjs'), process.argv[2], require);
// Before anything is written: an unwritable stdout is reported, not lost (src/cli/process-exit.ts).
cli.watchOutput();
cli.main(process.argv).then((code) => {
  cli.saveCache(code);
  return cli.exitWhenWritten(code);
});
