// The CLI's code cache (src/startup/compile-cache.ts), through the real CLI: written once per command,
// reused, rewritten when V8 rejects it or a start went further than its writer, never written
// where someone else could have.
import {
  chmodSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { tempDirs } from '../helpers/temp.js';

const freshParent = tempDirs('leasejob-cc-');

const fresh = (): string => {
  const parent = freshParent();
  const dir = path.join(parent, 'cache');
  mkdirSync(dir, { mode: 0o700 });
  return dir;
};

describe('compile cache', () => {
  it('is written after the first start of a command, reused as is, and rewritten when V8 rejects it', async () => {
    const dir = fresh();
    const env = { LEASEJOB_COMPILE_CACHE: dir };
    // Left by an older build: replaced for its command, kept for another.
    writeFileSync(path.join(dir, 'other-10.0-x64-1-1.bin'), 'old');
    writeFileSync(path.join(dir, 'run-10.0-x64-1-1.bin'), 'old');
    // The operator's own files, in a directory LEASEJOB_COMPILE_CACHE named: never removed.
    const theirs = ['run-backup.bin', 'other-data.bin', 'status-notes.txt'];
    for (const f of theirs) writeFileSync(path.join(dir, f), 'mine');
    expect((await runCli(['--version'], env)).exitCode).toBe(0);
    expect(readdirSync(dir)).toContain('run-10.0-x64-1-1.bin');
    const files = readdirSync(dir).filter((f) => f.startsWith('other-') && f !== 'other-data.bin');
    expect(files).toHaveLength(1);
    expect(files[0]).toMatch(/^other-.*\.bin$/); // `--version` is no command name
    const file = path.join(dir, files[0]!);
    const first = statSync(file);
    expect(first.size).toBeGreaterThan(10_000);
    expect(first.mode & 0o777).toBe(0o644);

    // A second start reads it and writes nothing.
    const again = await runCli(['--version'], env);
    expect(again.exitCode).toBe(0);
    expect(again.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
    expect(statSync(file).mtimeMs).toBe(first.mtimeMs);

    // Garbage is rejected by V8 (the start still works) and replaced by a good cache.
    writeFileSync(file, 'not a code cache');
    const rejected = await runCli(['--version'], env);
    expect(rejected.exitCode).toBe(0);
    expect(statSync(file).size).toBeGreaterThan(10_000);
    expect(readFileSync(file).subarray(0, 16).toString()).not.toBe('not a code cache');

    // Another command gets its own file. Another install's cache of it (a second leasejob on
    // the host) is kept, or the two would evict each other at every start; unless it has not
    // been written for 30 days.
    const otherInstall = 'run-10.0-x64-0a1b2c3d-1-1.bin';
    const readInstall = 'run-10.0-x64-0c1d2e3f-1-1.bin'; // written long ago, read lately
    const goneInstall = 'run-10.0-x64-0e1f2a3b-1-1.bin';
    for (const f of [otherInstall, readInstall, goneInstall]) writeFileSync(path.join(dir, f), 'theirs');
    const longAgo = new Date(Date.now() - 31 * 24 * 3600_000);
    utimesSync(path.join(dir, readInstall), new Date(), longAgo);
    utimesSync(path.join(dir, goneInstall), longAgo, longAgo);
    expect((await runCli(['run', '--help'], env)).exitCode).toBe(0);
    expect(
      readdirSync(dir).filter(
        (f) => f.startsWith('run-') && f !== 'run-backup.bin' && f !== otherInstall && f !== readInstall,
      ),
    ).toHaveLength(1);
    expect(readdirSync(dir)).not.toContain('run-10.0-x64-1-1.bin');
    expect(readdirSync(dir)).toContain(otherInstall);
    expect(readdirSync(dir)).toContain(readInstall);
    expect(readdirSync(dir)).not.toContain(goneInstall);

    // A mistyped command shares the file of everything that is no command: no new file per typo.
    const before = readdirSync(dir).sort();
    expect((await runCli(['frobnicate'], env)).exitCode).toBe(64);
    expect((await runCli(['statsu'], env)).exitCode).toBe(64);
    expect(readdirSync(dir).sort()).toEqual(before);
    for (const f of theirs) expect(readFileSync(path.join(dir, f), 'utf8'), f).toBe('mine');
  });

  it('written by a start that stopped early, is rewritten by the first start that went further, then kept', async () => {
    const state = path.join(freshParent(), 'leasejob.db');
    const runFile = (dir: string): string =>
      path.join(
        dir,
        readdirSync(dir).find((f) => f.startsWith('run-'))!,
      );
    // The header: a magic, then how far the writing start went (0 stopped early, 1 answered, 2 whole).
    const reachOf = (file: string): string =>
      `${readFileSync(file).subarray(0, 5).toString('latin1')}:${readFileSync(file)[5]}`;
    const run = async (dir: string, window: string, ...db: string[]) =>
      await runCli(['run', '--name', 'cc', '--window', window, ...db, '--log-level', 'fatal', '--', 'true'], {
        LEASEJOB_COMPILE_CACHE: dir,
      });

    // As the image primes its cache: a run against a closed port (exit 69) compiles the start
    // and the connection, not the lease, the child or the outcome.
    const dir = fresh();
    expect((await run(dir, 'a', '--database-url', 'postgres://prime@127.0.0.1:1/prime')).exitCode).toBe(69);
    const file = runFile(dir);
    expect(reachOf(file)).toBe('LJCC1:0');
    const early = readFileSync(file);
    // The first run of a child rewrites it, holding both paths (more than either alone).
    expect((await run(dir, 'a', '--state-file', state)).exitCode).toBe(0);
    expect(reachOf(file)).toBe('LJCC1:2');
    const whole = readFileSync(file);
    expect(whole.length).toBeGreaterThan(early.length);
    // Then it is kept: by a run that went as far, and by one that went less far (window done).
    expect((await run(dir, 'b', '--state-file', state)).exitCode).toBe(0);
    const done = await run(dir, 'a', '--state-file', state);
    expect(done.exitCode).toBe(0);
    expect(readFileSync(file).equals(whole)).toBe(true);
    expect(readdirSync(dir)).toEqual([path.basename(file)]);

    // A cache first written by a run that found its window done (no child) is rewritten by the
    // first run that starts one.
    const dir2 = fresh();
    expect((await run(dir2, 'a', '--state-file', state)).exitCode).toBe(0);
    expect(reachOf(runFile(dir2))).toBe('LJCC1:1');
    expect((await run(dir2, 'c', '--state-file', state)).exitCode).toBe(0);
    expect(reachOf(runFile(dir2))).toBe('LJCC1:2');

    // `run --help` (exit 0) ran no command: what it wrote is rewritten by the first real run.
    // That rewrite also removes what a start killed while writing left over an hour ago.
    const dir3 = fresh();
    expect((await runCli(['run', '--help'], { LEASEJOB_COMPILE_CACHE: dir3 })).exitCode).toBe(0);
    const helpFile = runFile(dir3);
    expect(reachOf(helpFile)).toBe('LJCC1:0');
    const leftOld = `${helpFile}.4194301.tmp`;
    const leftNew = `${helpFile}.4194302.tmp`;
    writeFileSync(leftOld, 'half');
    writeFileSync(leftNew, 'half');
    utimesSync(leftOld, new Date(Date.now() - 2 * 3600_000), new Date(Date.now() - 2 * 3600_000));
    expect((await run(dir3, 'd', '--state-file', state)).exitCode).toBe(0);
    expect(reachOf(helpFile)).toBe('LJCC1:2');
    expect(readdirSync(dir3).sort()).toEqual([path.basename(helpFile), path.basename(leftNew)].sort());
  });

  it('is not used in a directory others can write to, through a symlink, or when off; the CLI works the same', async () => {
    const open = fresh();
    chmodSync(open, 0o777);
    const link = path.join(path.dirname(fresh()), 'link');
    const target = fresh();
    symlinkSync(target, link);
    const notADir = path.join(path.dirname(fresh()), 'file');
    writeFileSync(notADir, '');
    for (const setting of [open, link, path.join(notADir, 'below'), 'off']) {
      const r = await runCli(['--version'], { LEASEJOB_COMPILE_CACHE: setting });
      expect(r.exitCode, `${setting}: ${r.all}`).toBe(0);
      expect(r.stderr, setting).toBe('');
    }
    expect(readdirSync(open)).toEqual([]);
    expect(readdirSync(target)).toEqual([]);

    // Off means nowhere: not the default directory under the OS temp dir, nor a directory named
    // after the setting. (Checked against a run without the setting, which does write there.)
    for (const setting of ['off', '0', undefined]) {
      const tmp = freshParent();
      const cwd = freshParent();
      const r = await runCli(['--version'], { LEASEJOB_COMPILE_CACHE: setting, TMPDIR: tmp }, { cwd });
      expect(r.exitCode, r.all).toBe(0);
      expect(readdirSync(cwd), String(setting)).toEqual([]);
      if (setting === undefined)
        expect(readdirSync(tmp).filter((f) => f.startsWith('leasejob-compile-cache-'))).toHaveLength(1);
      else expect(readdirSync(tmp), String(setting)).toEqual([]);
    }
  });
});
