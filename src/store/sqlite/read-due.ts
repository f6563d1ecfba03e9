// The monitor's read of due occurrences not completed, one probe per (job, due window).
import { type DueGroup, type DueNotCompleted, NOT_COMPLETED_LISTED, expectedFrom } from '../contract.js';
import { budgetOutcome } from './attempt-budget.js';
import type { Sqlite } from './context.js';

export async function readDueNotCompleted(s: Sqlite, groups: DueGroup[], name?: string): Promise<DueNotCompleted[]> {
  // `IS` is SQLite's NULL-safe equality. One primary-key probe per (job, due window), as the
  // PostgreSQL store; a window without a row is expected only of a job registered by then,
  // and not before its retention horizon (expectedFrom).
  const jobs = s.db.prepare(
    `SELECT name, created_at, schedule_since, (SELECT retained_from FROM retention t WHERE t.job = jobs.name) AS retained_from FROM jobs
      WHERE window_mode = 'schedule' AND schedule = ? AND tz IS ? AND window_format IS ? AND window_offset IS ?
        AND alert_after_ms IS ? AND alert_lookback_ms IS ? AND (? IS NULL OR name = ?)`,
  );
  const row = s.db.prepare(
    `SELECT ${budgetOutcome('windows')} AS outcome, generation, completed_at FROM windows WHERE job = ? AND window_key = ?`,
  );
  const out: DueNotCompleted[] = [];
  for (const g of groups) {
    const members = jobs.all(
      g.schedule,
      g.tz,
      g.windowFormat,
      g.windowOffset,
      g.alertAfterMs,
      g.alertLookbackMs,
      name ?? null,
      name ?? null,
    ) as Array<{ name: string; created_at: number; schedule_since: number | null; retained_from: number | null }>;
    for (const j of members) {
      const mine: DueNotCompleted[] = [];
      let count = 0;
      g.windows.forEach((w, k) => {
        const r = row.get(j.name, w.window) as
          { outcome: string; generation: number; completed_at: number | null } | undefined;
        if (r?.completed_at != null) return;
        if (r === undefined && w.scheduledAt.getTime() < expectedFrom(j.created_at, j.retained_from, j.schedule_since))
          return;
        if (
          w.legacy !== undefined &&
          (row.get(j.name, w.legacy) as { completed_at: number | null } | undefined)?.completed_at != null
        )
          return;
        count++;
        // As the PostgreSQL store: the oldest few, and the group's latest window.
        if (count <= NOT_COMPLETED_LISTED || k === g.windows.length - 1)
          mine.push({
            job: j.name,
            count: 0,
            window: w.window,
            outcome: r?.outcome ?? null,
            generation: r ? String(r.generation) : null,
          });
      });
      for (const m of mine) m.count = count;
      out.push(...mine);
    }
  }
  return out;
}
