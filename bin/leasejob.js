#!/usr/bin/env node
// Entry point: the CLI decides the exit code; this file only exits with it.
import { main } from '../dist/cli.js';

process.exit(await main(process.argv));
