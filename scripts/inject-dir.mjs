// `npm run single-file:inject [-- --file FILE] [-- --out DIR]` (default dist/single-file/inject):
// the directory the Helm chart puts at /leasejob in a job's own container, mounted from the
// leasejob image or copied from it, that runs whatever the image holds: glibc, musl (Alpine), or
// no libc at all (distroless/static, scratch). It brings its own:
//   leasejob   the single file (npm run single-file), its ELF interpreter set to lib/'s loader
//              and its library path (DT_RPATH) to lib/, both at /leasejob (patchelf)
//   lib/       glibc's loader and the shared libraries the single file links (ldd), copied from
//              this machine's glibc (Debian 12's in the Dockerfile)
//   tini       Debian's static tini: PID 1, forwards SIGTERM, reaps orphans
//   busybox    Debian's static busybox: the shell that runs `start`
//   start      deploy/inject/start
//   leasejob-guard  the native guard (src/native/guard.c, static), beside the single file where
//              it looks for it; without one built, leasejob runs the Node guard (itself)
// Nothing of it reaches the job's command: the kernel starts the child with the child's own
// ELF interpreter, so it runs on the image's libc; no LD_LIBRARY_PATH or LD_PRELOAD is set.
// DT_RPATH, not DT_RUNPATH: glibc searches it before LD_LIBRARY_PATH, so an image that sets
// LD_LIBRARY_PATH (CUDA images do) cannot hand leasejob a libc of its own.
//
// The interpreter's path is absolute (the kernel does not resolve one relative to the file), so
// the patched file runs as-is at /leasejob only; `start` run from elsewhere goes through the
// loader itself (`lib/ld-linux-* --library-path lib leasejob`).
//
// The libraries are this machine's: build on the architecture you ship (the Dockerfile builds
// per target architecture).
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readSync,
  readdirSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
/** Where the chart mounts the directory in a job's container: the interpreter's path starts here. */
export const MOUNT = '/leasejob';
const TINI = process.env.LEASEJOB_TINI ?? '/usr/bin/tini-static';
const BUSYBOX = process.env.LEASEJOB_BUSYBOX ?? '/bin/busybox';

/** Whether the ELF file at `file` asks for an interpreter (a PT_INTERP program header): not static. */
export function elfInterpreter(file) {
  const fd = openSync(file, 'r');
  try {
    const head = Buffer.alloc(64);
    readSync(fd, head, 0, 64, 0);
    if (head.toString('latin1', 0, 4) !== '\x7fELF' || head[4] !== 2) throw new Error(`${file}: not a 64-bit ELF file`);
    const phoff = Number(head.readBigUInt64LE(32));
    const [phentsize, phnum] = [head.readUInt16LE(54), head.readUInt16LE(56)];
    const ph = Buffer.alloc(phentsize * phnum);
    readSync(fd, ph, 0, ph.length, phoff);
    for (let i = 0; i < phnum; i++) {
      const at = i * phentsize;
      if (ph.readUInt32LE(at) !== 3) continue; // PT_INTERP
      const name = Buffer.alloc(Number(ph.readBigUInt64LE(at + 32)));
      readSync(fd, name, 0, name.length, Number(ph.readBigUInt64LE(at + 8)));
      return name.toString('latin1').replace(/\0+$/, '');
    }
    return undefined;
  } finally {
    closeSync(fd);
  }
}

/** The shared objects `file` loads, as ldd resolves them here: [{ name, from }], the loader included. */
function sharedObjects(file) {
  const out = execFileSync('ldd', [file], { encoding: 'utf8' });
  const objects = [];
  for (const line of out.split('\n')) {
    const linked = /^\s*(\S+) => (\/\S+) \(/.exec(line); // libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)
    const loader = /^\s*(\/\S+) \(/.exec(line); // /lib64/ld-linux-x86-64.so.2 (0x...)
    if (linked) objects.push({ name: linked[1], from: linked[2] });
    else if (loader) objects.push({ name: path.basename(loader[1]), from: loader[1], loader: true });
    else if (/not found/.test(line)) throw new Error(`ldd ${file}: ${line.trim()}`);
  }
  if (!objects.some((o) => o.loader)) throw new Error(`ldd ${file} names no ELF interpreter: is it glibc-linked?`);
  return objects;
}

const bytesIn = (dir) =>
  readdirSync(dir, { recursive: true })
    .map((f) => statSync(path.join(dir, String(f))))
    .filter((s) => s.isFile())
    .reduce((n, s) => n + s.size, 0);

/**
 * The native guard for the single file at `file`: the one shipped beside it, else the build's
 * for this machine's architecture (the libraries are this machine's too); it must be static.
 */
function nativeGuardFor(file) {
  const arch = os.arch();
  const found = [
    path.join(path.dirname(file), `leasejob-guard-linux-${arch}`),
    path.join(ROOT, 'dist', 'guard', `linux-${arch}`, 'leasejob-guard'),
  ].find((f) => existsSync(f));
  if (found === undefined) {
    process.stderr.write('note: no native guard built (npm run build, musl-gcc): leasejob runs the Node guard\n');
    return undefined;
  }
  const interp = elfInterpreter(found);
  if (interp) throw new Error(`${found} is not static (it asks for ${interp}): the injected guard must need no libc`);
  return found;
}

/** The directory at `out` (replaced whole), from the single file at `file`. */
export function buildInjectDir({
  file = path.join(ROOT, 'dist', 'single-file', `leasejob-linux-${os.arch()}`),
  out = path.join(ROOT, 'dist', 'single-file', 'inject'),
} = {}) {
  if (!existsSync(file)) throw new Error(`${file} is missing: run \`npm run single-file\` first`);
  for (const [what, f] of [
    ['tini', TINI],
    ['busybox', BUSYBOX],
  ]) {
    if (!existsSync(f)) throw new Error(`${f} is missing (Debian's ${what === 'tini' ? 'tini' : 'busybox-static'})`);
    const interp = elfInterpreter(realpathSync(f));
    if (interp) throw new Error(`${f} is not static (it asks for ${interp}): the injected ${what} must need no libc`);
  }
  const partial = `${out}.${process.pid}.partial`;
  rmSync(partial, { recursive: true, force: true });
  mkdirSync(path.join(partial, 'lib'), { recursive: true });
  const objects = sharedObjects(file);
  for (const o of objects) copyFileSync(realpathSync(o.from), path.join(partial, 'lib', o.name));
  const loader = objects.find((o) => o.loader).name;
  const leasejob = path.join(partial, 'leasejob');
  copyFileSync(file, leasejob);
  // The SEA blob and V8's code cache survive: patchelf rewrites headers, not the note holding them.
  execFileSync('patchelf', [
    '--set-interpreter', `${MOUNT}/lib/${loader}`,
    '--force-rpath', '--set-rpath', `${MOUNT}/lib`,
    leasejob,
  ]); // prettier-ignore
  copyFileSync(TINI, path.join(partial, 'tini'));
  copyFileSync(BUSYBOX, path.join(partial, 'busybox'));
  copyFileSync(path.join(ROOT, 'deploy', 'inject', 'start'), path.join(partial, 'start'));
  const guard = nativeGuardFor(file);
  if (guard !== undefined) copyFileSync(guard, path.join(partial, 'leasejob-guard'));
  for (const f of ['leasejob', 'tini', 'busybox', `lib/${loader}`, ...(guard ? ['leasejob-guard'] : [])])
    chmodSync(path.join(partial, f), 0o755);
  chmodSync(path.join(partial, 'start'), 0o644);
  // It starts here, from anywhere, through its loader (as `start` does outside /leasejob).
  const version = execFileSync(
    path.join(partial, 'lib', loader),
    ['--library-path', path.join(partial, 'lib'), leasejob, '--version'],
    { encoding: 'utf8', env: {} },
  ).trim();
  rmSync(out, { recursive: true, force: true });
  renameSync(partial, out);
  return {
    dir: out,
    version,
    libraries: objects.map((o) => o.name),
    bytes: { total: bytesIn(out), lib: bytesIn(path.join(out, 'lib')) },
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { file: { type: 'string' }, out: { type: 'string' } } });
  try {
    const r = buildInjectDir({
      ...(values.file ? { file: path.resolve(values.file) } : {}),
      ...(values.out ? { out: path.resolve(values.out) } : {}),
    });
    process.stdout.write(`${r.dir}\n${r.bytes.total} bytes, of which lib/ ${r.bytes.lib} (${r.libraries.join(' ')})\n`);
  } catch (err) {
    process.stderr.write(`inject-dir: ${err.message}\n`);
    process.exit(1);
  }
}
