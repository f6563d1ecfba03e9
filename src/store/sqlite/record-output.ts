// A run's output tail: written with its window, read by `leasejob output` (as sql/functions/record_output.sql).
import type { RecordOutputInput, WindowOutput } from '../contract.js';
import type { Sqlite } from './context.js';

export async function recordOutput(s: Sqlite, i: RecordOutputInput): Promise<boolean> {
  return s.db
    .transaction(
      () =>
        s.db
          .prepare(
            `UPDATE windows SET output_tail = ?, output_bytes = ?, output_generation = generation, output_attempt = attempts,
              output_at = ?
      WHERE job = ? AND window_key = ? AND generation = ?`,
          )
          .run(i.tail, i.bytes, Date.now(), i.job, i.window, Number(i.generation)).changes === 1,
    )
    .immediate();
}

export async function readOutputs(s: Sqlite, job: string, limit: number): Promise<WindowOutput[]> {
  const rows = s.db
    .prepare(
      `SELECT window_key, output_generation, output_attempt, outcome, exit_code, output_at, output_bytes, output_tail
       FROM windows WHERE job = ? AND output_at IS NOT NULL ORDER BY output_at DESC, window_key LIMIT ?`,
    )
    .all(job, limit) as Array<Record<string, unknown>>;
  return rows.map((r) => ({
    window: r.window_key as string,
    generation: String(r.output_generation),
    attempt: r.output_attempt as number,
    outcome: r.outcome as string,
    exitCode: (r.exit_code as number | null) ?? null,
    recordedAt: new Date(r.output_at as number),
    bytes: r.output_bytes as number,
    tail: r.output_tail as Buffer,
  }));
}
