// Loads the CLI bundle (dist/leasejob.cjs) through V8's code cache. Compiling the bundle is a
// good part of what a start costs (docs/performance.md, "Start-up code cache"), and Node 20 has
// no built-in cache for it (module.enableCompileCache is Node 22.1+). After the command has run,
// V8 serializes every function it compiled on the way; the next start of the same command reads them back instead of compiling. V8 checks a
// cache against the source and its own version and flags, and rejects a stale one, which is
// then rewritten.
//
// A cache holds only what the start that wrote it compiled: one written by a start that stopped
// early (src/startup/start-reach.ts) is rewritten by the first start that went further, and then kept.
//
// Where: LEASEJOB_COMPILE_CACHE=<dir>, or `off`; by default a directory of this user under the
// OS temp dir. A directory is used only if it is ours or root's and nobody else can write to
// it, since whoever writes a cache chooses the code we run. Any failure (a read-only file
// system, a full disk) only means an uncached start.
import { isAscii } from 'node:buffer';
import {
  chmodSync,
  closeSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Script } from 'node:vm';
import { COMMANDS } from './command-names.js';
import { Reach } from './start-reach.js';

export interface LoadedCli {
  main(argv: string[]): Promise<number>;
  /** src/cli/process-exit.ts: how the process ends. */
  watchOutput(): void;
  exitWhenWritten(code: number): Promise<never>;
  /**
   * Write the cache if there was none, V8 rejected it, or this start went further than the one
   * that wrote it. Call once the command is done, with its exit code.
   */
  saveCache(exitCode: number): void;
  /** For tests and the benchmark: what happened to the cache. */
  readonly cache: 'off' | 'unusable' | 'cold' | 'rejected' | 'used';
}

export { COMMANDS };

/**
 * `load` is the bundle's `require`, for what it leaves out (better-sqlite3, pg-native, Node's
 * built-ins): the entry's own, since bin/ and dist/ resolve packages from the same node_modules.
 * Passed in rather than made with node:module's createRequire: loading node:module would cost
 * every start, for nothing the entry's own require cannot do (scripts/bundle.mjs keeps such
 * built-ins off the start).
 */
export function loadCli(
  bundle: string,
  command: string | undefined,
  load: NodeJS.Require,
  env: NodeJS.ProcessEnv = process.env,
): LoadedCli {
  const read = readBundle(bundle, command, env);
  const { file } = read;
  let state = read.state;
  const { cachedData, writtenReach } = readCache(file);
  // The CommonJS wrapper, as Node's own loader puts around a module.
  const wrapped = `(function (exports, require, module, __filename, __dirname) { ${read.source}\n});`;
  const script = new Script(wrapped, { filename: bundle, ...(cachedData ? { cachedData } : {}) });
  if (cachedData) state = script.cachedDataRejected ? 'rejected' : 'used';
  const mod = {
    exports: {} as Partial<Pick<LoadedCli, 'main' | 'watchOutput' | 'exitWhenWritten'>> & {
      reach?: (exitCode: number) => number;
    },
  };
  (script.runInThisContext() as (...args: unknown[]) => void).call(
    mod.exports,
    mod.exports,
    load,
    mod,
    bundle,
    path.dirname(bundle),
  );
  const { main, watchOutput, exitWhenWritten } = mod.exports;
  if (typeof main !== 'function' || watchOutput === undefined || exitWhenWritten === undefined)
    throw new Error(`leasejob: ${bundle} does not export main()`);

  return {
    main,
    watchOutput,
    exitWhenWritten,
    get cache() {
      return state;
    },
    saveCache(exitCode) {
      if (file === undefined) return;
      const reached = mod.exports.reach?.(exitCode) ?? (exitCode === 0 ? Reach.whole : Reach.none);
      if (state === 'used' && reached <= writtenReach) return;
      writeCache(file, script, reached, bundle);
    },
  };
}

/** The bundle's source, and the cache file of this command for it (undefined: no cache). */
function readBundle(
  bundle: string,
  command: string | undefined,
  env: NodeJS.ProcessEnv,
): { source: string; file: string | undefined; state: LoadedCli['cache'] } {
  const fd = openSync(bundle, 'r');
  try {
    // The bundle is built ASCII-only (esbuild --charset=ascii): decoded as Latin-1 it is a
    // one-byte string, read in half the time of UTF-8. Anything else is decoded as UTF-8.
    const bytes = readFileSync(fd);
    const source = isAscii(bytes) ? bytes.toString('latin1') : bytes.toString('utf8');
    const setting = env.LEASEJOB_COMPILE_CACHE;
    if (setting === 'off' || setting === '0') return { source, file: undefined, state: 'off' };
    const dir = usableDir(
      setting ? path.resolve(setting) : path.join(tmpdir(), `leasejob-compile-cache-${process.getuid?.() ?? 'user'}`),
    );
    if (dir === undefined) return { source, file: undefined, state: 'unusable' };
    // One file per command: `--version` compiles little of what `run` needs. Anything else
    // (a typo, --help) shares one file, so mistyped commands cannot pile up files.
    const { size, mtimeMs } = fstatSync(fd);
    const name = command !== undefined && COMMANDS.has(command) ? command : 'other';
    const file = path.join(
      dir,
      `${name}-${process.versions.v8}-${process.arch}-${installTag(bundle)}-${size}-${Math.trunc(mtimeMs)}.bin`,
    );
    return { source, file, state: 'cold' };
  } finally {
    closeSync(fd);
  }
}

/** The code cache in `file`, and how far the start that wrote it went (-1: none). */
function readCache(file: string | undefined): { cachedData: Buffer | undefined; writtenReach: number } {
  if (file === undefined) return { cachedData: undefined, writtenReach: -1 };
  try {
    const bytes = readFileSync(file);
    if (bytes.length > HEADER.length && bytes.subarray(0, HEADER_MAGIC.length).equals(HEADER_MAGIC)) {
      // 8 bytes in: still aligned, V8 copies nothing.
      return { cachedData: bytes.subarray(HEADER.length), writtenReach: bytes[HEADER_MAGIC.length]! };
    }
  } catch {
    // No cache yet, or unreadable: compiled from source.
  }
  return { cachedData: undefined, writtenReach: -1 };
}

/** The script's code cache written to `file` (atomically), older ones of this command removed. */
function writeCache(file: string, script: Script, reached: number, bundle: string): void {
  const tmp = `${file}.${process.pid}.tmp`;
  let fd: number | undefined;
  try {
    // Opened first: where it cannot be written (an image's read-only cache), nothing is serialized.
    fd = openSync(tmp, 'w', 0o644);
    const header = Buffer.from(HEADER);
    header[HEADER_MAGIC.length] = reached;
    writeAll(fd, header);
    writeAll(fd, script.createCachedData());
    closeSync(fd);
    fd = undefined;
    chmodSync(tmp, 0o644); // whatever the umask: an image's baked cache serves its runtime user
    renameSync(tmp, file); // atomic: concurrent runners never read half a file
    removeOtherCaches(file, bundle);
  } catch {
    // Read-only or full: the next start compiles again, nothing else changes.
    try {
      if (fd !== undefined) closeSync(fd);
      rmSync(tmp, { force: true });
    } catch {
      // Nothing more to do: the cache is an optimisation.
    }
  }
}

/**
 * Older caches of this command and install (another build or Node) would only pile up.
 * Another install's (a second leasejob on the host, another version through npx) is left
 * alone, or the two would evict each other at every start; unless it has not been read or
 * written for STALE_CACHE_MS (its access time, which Linux updates about once a day as the file
 * is read; its write time where the filesystem keeps no access times): most likely an install
 * that is gone (it costs a live one a single uncached start).
 */
function removeOtherCaches(file: string, bundle: string): void {
  const dir = path.dirname(file);
  const command = path.basename(file).split('-')[0]!; // no '-' in a command name
  const ours = installTag(bundle);
  for (const f of readdirSync(dir)) {
    // Left by a start killed while writing: its pid is long gone once it is this old.
    const partial = /^(.+\.bin)\.\d+\.tmp$/.exec(f);
    const tag = cacheFileTag(command, partial ? partial[1]! : f);
    if (f === path.basename(file) || tag === undefined) continue;
    const other = path.join(dir, f);
    if (partial) {
      if (Date.now() - lastUsedMs(other) > STALE_TMP_MS) rmSync(other, { force: true });
    } else if (tag === null || tag === ours || Date.now() - lastUsedMs(other) > STALE_CACHE_MS)
      rmSync(other, { force: true });
  }
}

/**
 * What a cache file starts with: a magic, then how far the start that wrote it went
 * (src/startup/start-reach.ts), padded to 8 bytes so that V8's data stays aligned. Files without it are
 * from an earlier leasejob and are rewritten.
 */
const HEADER_MAGIC = Buffer.from('LJCC1', 'latin1');
const HEADER = Buffer.alloc(8);
HEADER_MAGIC.copy(HEADER);

/** All of `data`, or an error: a short write (a full disk) must not be renamed into place. */
function writeAll(fd: number, data: Uint8Array): void {
  for (let off = 0; off < data.length;) {
    const n = writeSync(fd, data, off);
    if (n <= 0) throw new Error('short write');
    off += n;
  }
}

/** A temporary file of a rewrite this old was left by a start killed while writing it. */
const STALE_TMP_MS = 3600_000;

/** How long another install's cache may go unwritten before a cleanup takes it for gone. */
const STALE_CACHE_MS = 30 * 24 * 3600_000;

/** When a cache file was last read or written, as far as the filesystem tells; now when it is gone. */
function lastUsedMs(file: string): number {
  try {
    const st = lstatSync(file);
    return Math.max(st.atimeMs, st.mtimeMs);
  } catch {
    return Date.now();
  }
}

/** FNV-1a of the bundle's path: each install of leasejob on a host keeps its own cache files. */
function installTag(bundle: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < bundle.length; i++) h = Math.imul(h ^ bundle.charCodeAt(i), 0x01000193) >>> 0;
  return h.toString(16).padStart(8, '0');
}

/**
 * The install tag of one of our cache files for `command`
 * (`<command>-<V8 version>-<arch>-<install tag>-<size>-<mtime>.bin`); null for one written before
 * installs were told apart (no tag); undefined for any other file. Cleanup removes only our
 * files: LEASEJOB_COMPILE_CACHE may name a directory holding others.
 */
export function cacheFileTag(command: string, name: string): string | null | undefined {
  const rest = name.startsWith(`${command}-`) ? name.slice(command.length + 1) : undefined;
  if (rest === undefined) return undefined;
  const tagged = /^\d+(?:\.\d+)+(?:-node\.\d+)?-[a-z0-9_]+-([0-9a-f]{8})-\d+-\d+\.bin$/.exec(rest);
  if (tagged) return tagged[1]!;
  return /^\d+(?:\.\d+)+(?:-node\.\d+)?-[a-z0-9_]+-\d+-\d+\.bin$/.test(rest) ? null : undefined;
}

/** Whether `name` is one of our cache files for `command`. */
export function isCacheFileOf(command: string, name: string): boolean {
  return cacheFileTag(command, name) !== undefined;
}

/** The directory, created if missing, when only its owner (us or root) can write to it. */
function usableDir(dir: string): string | undefined {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const st = lstatSync(dir);
    const uid = process.getuid?.();
    const trustedOwner = uid === undefined || st.uid === uid || st.uid === 0;
    return st.isDirectory() && trustedOwner && (st.mode & 0o022) === 0 ? dir : undefined;
  } catch {
    return undefined;
  }
}
