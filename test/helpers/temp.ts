// Temporary directories for test files, each removed by a hook registered where it is made.
// Call these while the file is collected (at its top level or in a describe body), not inside a
// hook or a test: that is where vitest registers hooks. Removal hooks run after the file's own
// hooks registered before them (vitest runs after-hooks last-registered first).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeEach } from 'vitest';

const make = (prefix: string): string => mkdtempSync(path.join(tmpdir(), prefix));
const remove = (dir: string): void => rmSync(dir, { recursive: true, force: true });

/** A directory made now, under the system temp dir, removed after the file's (or describe block's) tests. */
export function tempDir(prefix: string): string {
  const dir = make(prefix);
  afterAll(() => remove(dir));
  return dir;
}

/** A maker of fresh directories, one per call, all removed after the file's (or describe block's) tests. */
export function tempDirs(prefix: string): () => string {
  const made: string[] = [];
  afterAll(() => {
    for (const dir of made.splice(0)) remove(dir);
  });
  return () => {
    const dir = make(prefix);
    made.push(dir);
    return dir;
  };
}

/** A fresh directory for each test, made before it and removed after it: the getter returns the current test's. */
export function tempDirPerTest(prefix: string): () => string {
  let dir: string | undefined;
  beforeEach(() => {
    dir = make(prefix);
  });
  afterEach(() => {
    if (dir) remove(dir);
    dir = undefined;
  });
  return () => {
    if (dir === undefined) throw new Error('tempDirPerTest: read outside a test');
    return dir;
  };
}
