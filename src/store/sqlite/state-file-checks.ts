// Whether the state file can be trusted before SQLite opens it: the checks ssh makes of
// authorized_keys and gnupg of its home, so that another user cannot point leasejob (root's
// included) at a file of their choosing through a link, or swap the file under it.
import { closeSync, constants as fs, lstatSync, openSync, realpathSync, type Stats } from 'node:fs';
import path from 'node:path';
import { DatabaseError } from '../../errors.js';

/** S_ISVTX, the sticky bit (not in Node's fs.constants). */
const STICKY = 0o1000;

/** The files SQLite opens by name beside the state file (WAL mode). */
const SIDE_FILES = ['-wal', '-shm', '-journal'];

function refuse(file: string, why: string): never {
  throw new DatabaseError(
    `state file ${file}: ${why}; refused, as ssh refuses such a file (another user could make leasejob ` +
      `write where they choose). Keep the state file in a directory of the user that runs the jobs`,
    'E_STATE_FILE',
  );
}

function lstatOrUndefined(file: string): Stats | undefined {
  try {
    return lstatSync(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/**
 * Each directory from the file's up to `/`: owned by this user or root, and writable by no one
 * else, unless sticky (as /tmp is: others may add names there but not replace ours). Returns
 * whether a sticky directory open to others holds the file: it must then exist as ours before
 * SQLite opens it, so that no name another user planted first is ever followed.
 */
function checkDirectories(file: string, uid: number): boolean {
  let inSticky = false;
  let first = true;
  // Where the directory really is (as ssh checks it): a link on the way is followed, then what it
  // leads to is checked.
  for (let dir = realpathSync(path.dirname(file)); ; dir = path.dirname(dir)) {
    const st = lstatSync(dir);
    const openToOthers = (st.mode & 0o022) !== 0;
    const sticky = (st.mode & STICKY) !== 0;
    if (st.uid !== uid && st.uid !== 0)
      refuse(file, `the directory ${dir} belongs to uid ${st.uid}, not to this user (uid ${uid}) or root`);
    // Sticky (as /tmp is): others may add names there, but not rename or remove ours.
    if (openToOthers && !sticky)
      refuse(
        file,
        `the directory ${dir} is writable by other users (mode ${(st.mode & 0o7777).toString(8)}, not sticky)`,
      );
    if (openToOthers && sticky && first) inSticky = true;
    first = false;
    if (path.dirname(dir) === dir) return inSticky;
  }
}

/** The state file (and its side files, when there): a regular file of this user's, not a link. */
function checkFile(file: string, st: Stats, uid: number, shown = file): void {
  if (st.isSymbolicLink())
    refuse(shown, `${file} is a symbolic link; give the path of the file itself (links are not followed)`);
  if (!st.isFile()) return; // a directory or a device: said by the caller, as before
  if (st.uid !== uid) refuse(shown, `${file} belongs to uid ${st.uid}, not to this user (uid ${uid})`);
}

/**
 * Throws DatabaseError (exit 69) unless the state file and the directories above it are safe to
 * open as this user; creates a missing file (when `create`) without following a link, readable
 * by this user alone. Not on Windows (no uids).
 */
export function checkStateFile(file: string, create: boolean): void {
  if (typeof process.geteuid !== 'function') return;
  const uid = process.geteuid();
  const inSticky = checkDirectories(file, uid);
  const st = lstatOrUndefined(file);
  if (st !== undefined) checkFile(file, st, uid);
  for (const suffix of SIDE_FILES) {
    const side = lstatOrUndefined(file + suffix);
    if (side !== undefined) checkFile(file + suffix, side, uid, file);
  }
  if (st === undefined && create && inSticky) {
    // O_EXCL|O_NOFOLLOW: ours, made now, whatever name another user might plant meanwhile.
    try {
      closeSync(openSync(file, fs.O_RDWR | fs.O_CREAT | fs.O_EXCL | fs.O_NOFOLLOW, 0o600));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'EEXIST') throw err;
      checkFile(file, lstatSync(file), uid);
    }
  }
}
