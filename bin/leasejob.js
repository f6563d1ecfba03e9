#!/usr/bin/env node
// Entry point: the CLI decides the exit code; this file only exits with it.
import { main } from '../dist/cli.js';

const code = await main(process.argv);
// A slow reader on a pipe (`leasejob status | jq`) may not have taken all of stdout yet:
// exiting now would cut it short.
for (const stream of [process.stdout, process.stderr]) {
  if (stream.writableLength > 0) await new Promise((resolve) => stream.once('drain', resolve));
}
process.exit(code);
