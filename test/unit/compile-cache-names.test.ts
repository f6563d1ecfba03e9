// The code cache keeps one file per command, named from a list of its own (it runs before the
// bundle, so it cannot ask commander). A command missing there would share the catch-all file.
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli.js';
import { COMMANDS } from '../../src/compile-cache.js';

describe('compile cache command names', () => {
  it('are exactly the CLI commands', () => {
    expect([...COMMANDS].sort()).toEqual(buildProgram().commands.map((c) => c.name()).sort());
  });
});
