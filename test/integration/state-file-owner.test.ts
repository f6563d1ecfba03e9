// The embedded store's file is opened only when it and the directories above it are the
// runner's (issue 20): a link planted in a sticky, world-writable directory, a file of another
// user's, or a directory others may write are refused with exit 69 before anything is written,
// as ssh refuses such files. Real CLI, real files; another user's file needs root (chown).
import {
  chmodSync,
  chownSync,
  existsSync,
  lchownSync,
  mkdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { NO_DB_ENV } from '../helpers/both-stores.js';
import { tempDirs } from '../helpers/temp.js';

const newDir = tempDirs('leasejob-state-owner-');
const isRoot = process.geteuid?.() === 0;
/** Another user: nobody, on Debian and most distributions. */
const OTHER_UID = 65534;

/** A directory as /tmp is: world-writable with the sticky bit. */
function stickyDir(): string {
  const dir = path.join(newDir(), 'shared');
  mkdirSync(dir);
  chmodSync(dir, 0o1777);
  return dir;
}

const run = (file: string, marker: string) =>
  runCli(['run', '--state-file', file, '--name', 'owner', '--', 'sh', '-c', `echo ran > '${marker}'`], NO_DB_ENV);

describe('the state file must be the runner own', () => {
  it('a link planted in a sticky, world-writable directory is refused (exit 69); its target is left as it was', async () => {
    const dir = stickyDir();
    const victim = path.join(newDir(), 'precious');
    writeFileSync(victim, 'precious data\n');
    const file = path.join(dir, 'state.db');
    symlinkSync(victim, file);
    if (isRoot) lchownSync(file, OTHER_UID, OTHER_UID);
    const marker = path.join(dir, 'ran');
    const r = await run(file, marker);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toContain('is a symbolic link');
    expect(readFileSync(victim, 'utf8')).toBe('precious data\n');
    expect(existsSync(marker)).toBe(false);
    // status reads through the same check.
    const s = await runCli(['status', '--state-file', file], NO_DB_ENV);
    expect(s.exitCode, s.all).toBe(69);
  });

  it('a dangling link is refused too: no database is created where it points', async () => {
    const dir = stickyDir();
    const target = path.join(newDir(), 'made-by-a-link.db');
    const file = path.join(dir, 'state.db');
    symlinkSync(target, file);
    const r = await run(file, path.join(dir, 'ran'));
    expect(r.exitCode, r.all).toBe(69);
    expect(existsSync(target)).toBe(false);
  });

  it.runIf(isRoot)(
    'a file of another user is refused (exit 69), and so is a WAL file of theirs beside ours',
    async () => {
      const dir = stickyDir();
      const file = path.join(dir, 'state.db');
      writeFileSync(file, '');
      chownSync(file, OTHER_UID, OTHER_UID);
      const r = await run(file, path.join(dir, 'ran'));
      expect(r.exitCode, r.all).toBe(69);
      expect(r.stderr).toContain(`belongs to uid ${OTHER_UID}`);

      const own = path.join(stickyDir(), 'state.db');
      expect((await run(own, path.join(path.dirname(own), 'ran'))).exitCode).toBe(0);
      writeFileSync(`${own}-wal`, '');
      chownSync(`${own}-wal`, OTHER_UID, OTHER_UID);
      const w = await run(own, path.join(path.dirname(own), 'ran-again'));
      expect(w.exitCode, w.all).toBe(69);
      expect(w.stderr).toContain('-wal belongs to uid');
    },
  );

  it.runIf(isRoot)('a directory of another user above it is refused (exit 69)', async () => {
    const dir = path.join(newDir(), 'theirs');
    mkdirSync(dir);
    chownSync(dir, OTHER_UID, OTHER_UID);
    const r = await run(path.join(dir, 'state.db'), path.join(dir, 'ran'));
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toContain(`belongs to uid ${OTHER_UID}`);
  });

  it('a directory others may write without the sticky bit is refused (exit 69)', async () => {
    const dir = path.join(newDir(), 'open');
    mkdirSync(dir);
    chmodSync(dir, 0o777);
    const marker = path.join(dir, 'ran');
    const r = await run(path.join(dir, 'state.db'), marker);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr).toContain('writable by other users');
    expect(existsSync(marker)).toBe(false);
  });

  it('in a sticky directory, a file made by the run itself is used: ours, mode 0600', async () => {
    const dir = stickyDir();
    const file = path.join(dir, 'state.db');
    const marker = path.join(dir, 'ran');
    const r = await run(file, marker);
    expect(r.exitCode, r.all).toBe(0);
    expect(existsSync(marker)).toBe(true);
    const st = statSync(file);
    expect(st.uid).toBe(process.geteuid?.());
    expect(st.mode & 0o777).toBe(0o600);
    expect((await run(file, marker)).exitCode).toBe(0);
  });
});
