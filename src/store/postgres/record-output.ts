// A run's output tail: written with its window, read by `leasejob output` (as sql/functions/record_output.sql).
import { EVENT_TIMEOUT_MS, type RecordOutputInput, type WindowOutput } from '../contract.js';
import type { Pg } from './context.js';

export async function recordOutput(db: Pg, i: RecordOutputInput): Promise<boolean> {
  const { rows } = await db.query(
    `SELECT ${db.s}.record_output($1, $2, $3, $4, $5) AS recorded`,
    [i.job, i.window, i.generation, i.tail, i.bytes],
    i.answerTimeoutMs ?? EVENT_TIMEOUT_MS,
  );
  return rows[0].recorded === true;
}

export async function readOutputs(db: Pg, job: string, limit: number): Promise<WindowOutput[]> {
  let rows;
  try {
    ({ rows } = await db.query(
      `SELECT window_key, output_generation, output_attempt, outcome, exit_code, output_at, output_bytes, output_tail
         FROM ${db.s}.windows WHERE job = $1 AND output_at IS NOT NULL ORDER BY output_at DESC, window_key LIMIT $2`,
      [job, limit],
    ));
  } catch (err) {
    // A schema before 015 (sql/015_output_tail.sql) has no outputs to show.
    if ((err as { code?: unknown }).code === '42703') return [];
    throw err;
  }
  return rows.map((r) => ({
    window: r.window_key,
    generation: String(r.output_generation),
    attempt: r.output_attempt,
    outcome: r.outcome,
    exitCode: r.exit_code,
    recordedAt: r.output_at,
    bytes: Number(r.output_bytes),
    tail: r.output_tail,
  }));
}
