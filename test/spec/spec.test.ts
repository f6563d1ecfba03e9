// The bounded run of the protocol's specification (docs/spec.md): Quint's simulator over
// docs/spec/leasejob.qnt with every fix on, every invariant checked after every step. The long
// runs and the runs that take a fix away are `npm run spec` (test/spec/run.mjs).
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/wait.js';

const seed = process.env.LEASEJOB_SPEC_SEED || String(Math.floor(Math.random() * 2 ** 31));

describe('the protocol specification', () => {
  it('no invariant fails in random executions of the spec with every fix on', () => {
    const r = spawnSync(
      process.execPath,
      [path.join(ROOT, 'test', 'spec', 'run.mjs'), '--samples', '10', '--steps', '25', '--seed', seed],
      { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
    );
    const out = `${r.stdout}${r.stderr}`;
    console.log(out.trim().split('\n').at(-1));
    // A failure prints the execution that broke an invariant, and its seed.
    expect(r.status, out).toBe(0);
  }, 180_000);
});
