// `leasejob mark`: a window recorded by hand (as sql/functions/mark_window.sql).
import type { MarkInput, OperatorResult } from '../contract.js';
import { type JobRecord, type LeaseRecord, type Sqlite, expired, hostMonotonicMs } from './context.js';
import { bumpVersion, operatorJob } from './operator-job.js';
import { recordEventSync } from './record-event.js';

/**
 * The scheduled time of a window `leasejob mark` writes, when its key says it: an ISO-8601 key of
 * a --window-from-schedule job without format or offset (as mark_window in PostgreSQL), else null.
 */
function markedScheduledAt(job: JobRecord, window: string): number | null {
  if (job.window_mode !== 'schedule' || job.window_format !== null || job.window_offset !== null) return null;
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(window)) return null;
  const at = Date.parse(window);
  return Number.isNaN(at) ? null : at;
}

export async function mark(s: Sqlite, i: MarkInput): Promise<OperatorResult> {
  return s.db
    .transaction((): OperatorResult => {
      const now = Date.now();
      const got = operatorJob(s, i, now);
      if ('refused' in got) return got.refused;
      const { job } = got;
      const lease = s.db.prepare('SELECT * FROM leases WHERE name = ?').get(i.job) as LeaseRecord | undefined;
      if (lease && !expired(s, lease, hostMonotonicMs()) && lease.window_key === i.window) {
        return {
          status: 'busy',
          version: job.version,
          seq: null,
          dbNow: new Date(now),
          holder: lease.owner,
          holderGeneration: String(lease.generation),
        };
      }
      const prev = s.db.prepare('SELECT outcome FROM windows WHERE job = ? AND window_key = ?').get(i.job, i.window) as
        { outcome: string } | undefined;
      const version = bumpVersion(s, i.job, now);
      const seq = recordEventSync(
        s,
        {
          job: i.job,
          kind: 'window-marked',
          window: i.window,
          owner: i.by,
          hostTime: i.hostTime,
          detail: {
            outcome: i.outcome,
            reason: i.reason,
            by: i.by,
            version,
            previous_version: job.version,
            previous_outcome: prev?.outcome,
          },
        },
        now,
      );
      s.db
        .prepare(
          `INSERT INTO windows (job, window_key, scheduled_at, owner, generation, attempts, first_started_at, started_at,
            finished_at, completed_at, outcome)
       VALUES (@job, @window, @at, @by, 0, 0, @now, @now, @now, @now, @outcome)
       ON CONFLICT (job, window_key) DO UPDATE SET outcome = @outcome, finished_at = @now, completed_at = @now, exit_code = NULL,
         scheduled_at = coalesce(scheduled_at, @at), owner = @by, generation = 0`,
        )
        .run({
          job: i.job,
          window: i.window,
          at: markedScheduledAt(job, i.window),
          by: i.by,
          now,
          outcome: i.outcome,
        });
      return {
        status: 'done',
        version,
        seq: String(seq),
        dbNow: new Date(now),
        previousOutcome: prev?.outcome ?? null,
      };
    })
    .immediate();
}
