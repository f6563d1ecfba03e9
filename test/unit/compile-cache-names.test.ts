// The code cache keeps one file per command, named from a list of its own (it runs before the
// bundle, so it cannot ask commander). A command missing there would share the catch-all file.
import { describe, expect, it } from 'vitest';
import { buildProgram, COMMAND_NAMES } from '../../src/cli/main.js';
import { cacheFileTag, COMMANDS, isCacheFileOf } from '../../src/startup/compile-cache.js';

describe('compile cache command names', () => {
  it('are exactly the CLI commands', () => {
    expect([...COMMANDS].sort()).toEqual(
      buildProgram()
        .commands.map((c) => c.name())
        .sort(),
    );
    expect([...COMMAND_NAMES].sort()).toEqual([...COMMANDS].sort());
  });

  it('a start defines only the command it runs; help and unknown commands get them all', () => {
    for (const name of COMMAND_NAMES) expect(buildProgram(name).commands.map((c) => c.name())).toEqual([name]);
    expect(buildProgram().commands).toHaveLength(COMMAND_NAMES.size);
  });

  it('cleanup recognises only its own file names, never an operator file that looks alike', () => {
    for (const ours of [
      'run-11.3.244.8-node.29-x64-631861-1764547200000.bin',
      'run-10.0-x64-1-1.bin',
      'other-12.4.254.21-node.33-arm64-5-6.bin',
      'run-11.3.244.8-node.38-x64-0a1b2c3d-650318-1796121246097.bin',
      'status-10.0-arm64-12345678-1-1.bin',
    ]) {
      expect(isCacheFileOf(ours.split('-')[0]!, ours), ours).toBe(true);
    }
    for (const theirs of [
      'run-backup.bin',
      'run-notes-2024.bin',
      'run-1.bin',
      'other-data.bin',
      'run-11.3-x64-1-1.bin.bak',
      'runx-10.0-x64-1-1.bin',
    ]) {
      expect(isCacheFileOf('run', theirs) || isCacheFileOf('other', theirs), theirs).toBe(false);
    }
  });

  it('tell installs apart: the tag of the bundle path, none for files written before tags', () => {
    expect(cacheFileTag('run', 'run-11.3.244.8-node.38-x64-0a1b2c3d-650318-1796121246097.bin')).toBe('0a1b2c3d');
    expect(cacheFileTag('status', 'status-10.0-arm64-12345678-1-1.bin')).toBe('12345678');
    expect(cacheFileTag('run', 'run-11.3.244.8-node.29-x64-631861-1764547200000.bin')).toBeNull();
    expect(cacheFileTag('run', 'status-10.0-arm64-12345678-1-1.bin')).toBeUndefined();
    expect(cacheFileTag('run', 'run-10.0-x64-0A1B2C3D-1-1.bin')).toBeUndefined(); // not a tag of ours
  });
});
