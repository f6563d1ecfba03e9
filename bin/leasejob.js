#!/usr/bin/env node
// Entry point: the CLI decides the exit code; this file only exits with it.
// The CLI bundle (esbuild, split per command): a third less start time and memory than
// loading dist/*.js and node_modules file by file (measured by npm run bench).
import module from 'node:module';

// Node 22.1+ keeps V8's compiled code of the bundle between runs (in the OS temp dir, or
// NODE_COMPILE_CACHE): compiling is a good part of what a start costs. No-op on Node 20.
module.enableCompileCache?.();
const { main } = await import('../dist/bundle/cli.js');

const code = await main(process.argv);
// A slow reader on a pipe (`leasejob status | jq`) may not have taken all of stdout yet:
// exiting now would cut it short. Bounded, so a reader that never reads cannot hold us.
const DRAIN_LIMIT_MS = 10_000;
const drained = (stream) =>
  stream.writableLength === 0 ? Promise.resolve() : new Promise((resolve) => stream.once('drain', resolve));
const limit = new Promise((resolve) => setTimeout(resolve, DRAIN_LIMIT_MS).unref());
await Promise.race([Promise.all([drained(process.stdout), drained(process.stderr)]), limit]);
process.exit(code);
