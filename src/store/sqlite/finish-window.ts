// The finish of one window of a sequence, the lease kept (as sql/functions/finish_window.sql).
import type { FinishInput } from '../contract.js';
import { type Sqlite, hostMonotonicMs } from './context.js';
import { recordLostSync } from './finish.js';
import { recordEventSync } from './record-event.js';
import { heldLease } from './renew.js';

/** See LeaseStore.finishWindow; as sql/013_catch_up.sql's finish_window. */
export async function finishWindow(s: Sqlite, i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
  return s.db
    .transaction(() => {
      const now = Date.now();
      const held = heldLease(s, i.job, i.owner, i.generation, hostMonotonicMs()) !== undefined;
      const w = s.db
        .prepare('SELECT outcome, finished_at FROM windows WHERE job = ? AND window_key = ? AND generation = ?')
        .get(i.job, i.window ?? null, Number(i.generation)) as
        { outcome: string; finished_at: number | null } | undefined;
      if (w?.finished_at != null && w.outcome === i.outcome) return { held: true, dbNow: new Date(now) };
      const detail = i.detail ?? {};
      if (held && (i.outcome === 'completed' || i.outcome === 'failed' || i.outcome === 'replaced')) {
        s.db
          .prepare(
            `UPDATE windows SET outcome = @outcome, exit_code = @exit, finished_at = @now, completed_at = CASE WHEN @outcome
              = 'completed' THEN @now END
          WHERE job = @job AND window_key = @window AND generation = @generation`,
          )
          .run({
            outcome: i.outcome,
            exit: i.exitCode ?? null,
            now,
            job: i.job,
            window: i.window ?? null,
            generation: Number(i.generation),
          });
        recordEventSync(
          s,
          {
            job: i.job,
            kind: `window-${i.outcome}`,
            window: i.window,
            owner: i.owner,
            generation: i.generation,
            hostTime: i.hostTime,
            detail: {
              exit_code: i.exitCode,
              attempt: detail.attempt,
              duration_ms: detail.duration_ms,
              aborted: detail.aborted,
            },
          },
          now,
        );
      } else if (!held) {
        recordLostSync(s, i, detail.aborted, now);
      }
      return { held, dbNow: new Date(now) };
    })
    .immediate();
}
