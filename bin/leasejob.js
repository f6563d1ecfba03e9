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

// Output that cannot be written. A reader that went away (`leasejob status | head -1`, EPIPE)
// wanted no more: the command's own exit code stands. Anything else (a full disk, ENOSPC) means
// what the caller asked for was lost: exit 74 (EX_IOERR) saying so, never 0. stderr's own
// errors cannot be reported anywhere and are ignored.
let outputError;
process.stdout.on('error', (err) => {
  if (err.code !== 'EPIPE') outputError ??= err;
});
process.stderr.on('error', () => {});

const cli = loadCli(path.join(__dirname, '..', 'dist', 'leasejob.cjs'), process.argv[2], require);
cli.main(process.argv).then(async (code) => {
  cli.saveCache(code);
  // A slow reader on a pipe (`leasejob status | jq`) may not have taken all of stdout yet:
  // exiting now would cut it short. Bounded, so a reader that never reads cannot hold us.
  const DRAIN_LIMIT_MS = 10_000;
  const drained = (stream) =>
    stream.writableLength === 0 || stream.destroyed
      ? Promise.resolve()
      : new Promise((resolve) => {
          stream.once('drain', resolve);
          stream.once('close', resolve);
        });
  const limit = new Promise((resolve) => setTimeout(resolve, DRAIN_LIMIT_MS).unref());
  await Promise.race([Promise.all([drained(process.stdout), drained(process.stderr)]), limit]);
  // A failed write to a file reports its error a tick later.
  await new Promise((resolve) => setImmediate(resolve));
  if (outputError !== undefined) {
    process.stderr.write(`leasejob: could not write the output: ${outputError.code ?? outputError.message}\n`);
    process.exit(74);
  }
  process.exit(code);
});
