// libfaketime for one process tree: a wall clock read from an offset file on every call, the
// monotonic clock left true, as NTP stepping one machine's clock would do. Shared by the tests
// that skew or jump the clock and by the chaos harness's clock hosts.
import { existsSync } from 'node:fs';

const LIBRARIES = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/faketime/libfaketime.so.1',
  '/usr/local/lib/faketime/libfaketime.so.1',
];

/** @returns {string | undefined} the libfaketime to preload, if installed (Debian package `faketime`) */
export function faketimeLibrary() {
  return LIBRARIES.find((p) => existsSync(p));
}

/**
 * The environment that makes a process (and its children) take its wall clock from `clockFile`:
 * an offset such as `+0s` or `-600s`, re-read on every call, so rewriting it is a jump.
 * @param {string} library from faketimeLibrary()
 * @param {string} clockFile
 * @returns {{ LD_PRELOAD: string, FAKETIME_TIMESTAMP_FILE: string, FAKETIME_NO_CACHE: string, FAKETIME_DONT_FAKE_MONOTONIC: string }}
 */
export function faketimeEnv(library, clockFile) {
  return {
    LD_PRELOAD: library,
    FAKETIME_TIMESTAMP_FILE: clockFile,
    FAKETIME_NO_CACHE: '1', // re-read the file on every call: a write is a jump mid-run
    FAKETIME_DONT_FAKE_MONOTONIC: '1', // only the wall clock is wrong, as on a real host
  };
}
