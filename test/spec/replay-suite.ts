// The spec's traces replayed on one store (docs/spec.md): traces of whole commands drawn by
// Quint's simulator (`mbtStep`, or `mbtStepPg` for PostgreSQL, which the harness does not
// restore), each replayed through the model-based harness (test/model/itf-replay.ts), and the
// kept traces of test/spec/regressions/ for this store. A trace that disagrees is written to the
// temp directory and named in the failure: keep it in test/spec/regressions/ as
// `<store>-<what>.itf.json`.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testDb, type TestDb } from '../helpers/db.js';
import { ROOT } from '../helpers/wait.js';
import type { StoreKind } from '../model/harness.js';
import { replayStore, replayTrace } from '../model/itf-replay.js';

const REGRESSIONS = path.join(ROOT, 'test', 'spec', 'regressions');

/** Draws `n` traces of up to `steps` whole commands from the spec; returns their files. */
function drawTraces(kind: StoreKind, n: number, steps: number, seed: string): string[] {
  const dir = mkdtempSync(path.join(tmpdir(), `leasejob-spec-${kind}-`));
  const r = spawnSync(
    process.execPath,
    [
      path.join(ROOT, 'test', 'spec', 'run.mjs'),
      ...['--step', kind === 'sqlite' ? 'mbtStep' : 'mbtStepPg'],
      ...['--samples', String(n), '--traces', String(n), '--steps', String(steps), '--seed', seed],
      ...['--out-itf', path.join(dir, 'trace_{seq}.itf.json')],
    ],
    { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
  );
  if (r.status !== 0) throw new Error(`the spec's simulator failed (seed ${seed}):\n${r.stdout}${r.stderr}`);
  return readdirSync(dir)
    .filter((f) => f.endsWith('.itf.json'))
    .sort()
    .map((f) => path.join(dir, f));
}

export function replaySuite(kind: StoreKind, bounded: { traces: number; steps: number }): void {
  let db: TestDb | undefined;
  const store = replayStore(kind, () => db);
  const seed = process.env.LEASEJOB_SPEC_SEED || String(Math.floor(Math.random() * 2 ** 31));
  const traces = Number(process.env.LEASEJOB_SPEC_TRACES || bounded.traces);
  const steps = Number(process.env.LEASEJOB_SPEC_STEPS || bounded.steps);
  const kept = readdirSync(REGRESSIONS).filter((f) => f.startsWith(`${kind}-`) && f.endsWith('.itf.json'));

  describe(`the spec's traces on ${kind === 'sqlite' ? 'the embedded store' : 'PostgreSQL'}`, () => {
    if (kind === 'postgres') {
      beforeAll(async () => {
        db = await testDb();
      });
      afterAll(async () => {
        await db?.close();
      });
    }

    it(`${traces} traces of up to ${steps} commands drawn from the spec agree with the model and the store`, async () => {
      for (const file of drawTraces(kind, traces, steps, seed)) {
        try {
          const { steps: done } = await replayTrace(store, file);
          console.log(`spec trace on ${kind} (seed ${seed}): ${done.join(' -> ')}`);
        } catch (e) {
          const keep = path.join(tmpdir(), `${kind}-seed${seed}-${path.basename(file)}`);
          copyFileSync(file, keep);
          expect.fail(`${(e as Error).message}\n  seed ${seed}; keep the trace: cp ${keep} ${REGRESSIONS}/`);
        }
      }
    }, 600_000);

    for (const f of kept)
      it(`regression: ${f}`, async () => {
        await replayTrace(store, path.join(REGRESSIONS, f));
      }, 600_000);
  });
}
