// A bounded chaos round inside `npm test`: test/chaos/run.mjs as a subprocess (its own
// PostgreSQL, real runners, every fault kind at least once), which must end with every
// invariant held. Set LEASEJOB_CHAOS_SEED to replay a seed; the seed is in the test name.
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/wait.js';

const SEED = process.env.LEASEJOB_CHAOS_SEED ?? String(1 + Math.floor(Math.random() * 2 ** 31));
// Said as the file loads, not only in the test's name when it ends: a run that dies keeps it.
console.log(`chaos: seed ${SEED} (LEASEJOB_CHAOS_SEED=${SEED} replays it)`);
// Kinds that need a tool the machine may lack; the report then says SKIPPED with the reason.
// failover, failover-sequence, restore-in-place, db-clock-step: opt-in (--failover,
// --restore-in-place, --db-clock-step: Debian postgresql-15, and faketime for the last), not in
// the bounded round.
const NEEDS_A_TOOL = new Set([
  'clock-skew-ahead',
  'clock-skew-behind',
  'clock-jump-back',
  'pgbouncer',
  'failover',
  'failover-sequence',
  'restore-in-place',
  'db-clock-step',
]);
// The round takes about 1.5-2 minutes on 2 cores; its own budget is 4 minutes.
const LIMIT_MS = 290_000;

interface ChaosReport {
  seed: string;
  faults: Record<string, number>;
  skippedKinds: Record<string, string>;
  missedFaults: Record<string, string[]>;
  violations: number;
  invariants: Record<string, { violations: number; details: string[] }>;
  elapsedS: number;
}

describe('chaos: one bounded round', () => {
  it(
    `holds every invariant with every fault kind injected (seed ${SEED})`,
    async () => {
      const r = await execa(process.execPath, ['test/chaos/run.mjs', '--rounds', '1', '--seed', SEED, '--bounded'], {
        cwd: ROOT,
        reject: false,
        all: true,
        timeout: LIMIT_MS,
      });
      const output = r.all ?? '';
      const line = output.split('\n').find((l) => l.startsWith('CHAOS-REPORT '));
      expect(
        line,
        `no report (exit ${r.exitCode}${r.timedOut ? ', timed out' : ''}):\n${output.slice(-6_000)}`,
      ).toBeDefined();
      const report = JSON.parse(line!.slice('CHAOS-REPORT '.length)) as ChaosReport;
      const text = output.slice(output.indexOf('=== leasejob chaos report'), output.indexOf('CHAOS-REPORT '));
      console.log(text);

      expect(r.exitCode, text).toBe(0);
      expect(report.violations, text).toBe(0);
      for (const [kind, n] of Object.entries(report.faults)) {
        if (report.skippedKinds[kind] !== undefined) {
          expect(NEEDS_A_TOOL.has(kind), `${kind} skipped: ${report.skippedKinds[kind]}`).toBe(true);
          continue;
        }
        expect(n, `fault ${kind} never injected: ${(report.missedFaults[kind] ?? []).join('; ')}`).toBeGreaterThan(0);
      }
    },
    LIMIT_MS + 10_000,
  );
});
