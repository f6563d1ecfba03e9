// The database URL read from a file (--database-url-file, LEASEJOB_DATABASE_URL_FILE): only a
// regular file of bounded size, judged on the opened file before a byte is read.
import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from 'node:fs';
import { UsageError } from '../../errors.js';

/**
 * The most a URL file may hold. A connection string with every TLS keyword is well under 4 KiB;
 * 64 KiB leaves room for comments of nobody's making while refusing a file that is no URL (a log,
 * an image) before reading it all.
 */
export const MAX_URL_FILE_BYTES = 64 * 1024;

/** What a file that is not a regular one is, in the message. */
function kindOf(st: Stats): string {
  if (st.isFIFO()) return 'a FIFO';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isDirectory()) return 'a directory';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

/**
 * The URL in `file`, without the line end a Secret or an editor leaves. Opened non-blocking (a
 * FIFO's open would wait for a writer, forever) and judged by fstat on that same descriptor (no
 * window between a check and the open): not a regular file, larger than MAX_URL_FILE_BYTES,
 * unreadable or empty: exit 64, naming it. A symlink is followed (a Kubernetes Secret volume's
 * files are symlinks).
 */
export function readUrlFile(file: string, name: string): string {
  if (file.trim() === '') throw new UsageError(`Expected ${name} to be a file path, got an empty string.`);
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new UsageError(`Cannot read the database URL from ${name} ${file} (${code}).`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new UsageError(`Expected ${name} ${file} to be a regular file, got ${kindOf(st)}.`);
    if (st.size > MAX_URL_FILE_BYTES)
      throw new UsageError(
        `Expected ${name} ${file} to hold a database URL (at most ${MAX_URL_FILE_BYTES} bytes), got ${st.size} bytes.`,
      );
    const url = readBounded(fd, file, name).trim();
    if (url === '') throw new UsageError(`Expected ${name} ${file} to hold a database URL, got an empty file.`);
    return url;
  } finally {
    closeSync(fd);
  }
}

/** At most MAX_URL_FILE_BYTES (a file that grew after fstat is refused, not read on). */
function readBounded(fd: number, file: string, name: string): string {
  const buf = Buffer.alloc(MAX_URL_FILE_BYTES + 1);
  let n = 0;
  try {
    while (n < buf.length) {
      const got = readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) break;
      n += got;
    }
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new UsageError(`Cannot read the database URL from ${name} ${file} (${code}).`);
  }
  if (n > MAX_URL_FILE_BYTES)
    throw new UsageError(
      `Expected ${name} ${file} to hold a database URL (at most ${MAX_URL_FILE_BYTES} bytes), got more.`,
    );
  return buf.subarray(0, n).toString('utf8');
}
