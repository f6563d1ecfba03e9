// Pause and resume (as sql/functions/pause_job.sql and resume_job.sql).
import type { OperatorResult, OperatorWrite, PauseInput } from '../contract.js';
import { type Sqlite, isPaused, iso } from './context.js';
import { bumpVersion, operatorJob } from './operator-job.js';
import { recordEventSync } from './record-event.js';

export async function pause(s: Sqlite, i: PauseInput): Promise<OperatorResult> {
  return s.db
    .transaction((): OperatorResult => {
      const now = Date.now();
      const got = operatorJob(s, i, now);
      if ('refused' in got) return got.refused;
      const { job } = got;
      const until = i.until !== undefined ? i.until.getTime() : i.untilMs !== undefined ? now + i.untilMs : null;
      if (until !== null && until <= now)
        return { status: 'bad-until', version: job.version, seq: null, dbNow: new Date(now) };
      const wasPaused = isPaused(job, now);
      s.db
        .prepare('UPDATE jobs SET paused_at = ?, paused_until = ?, pause_reason = ?, paused_by = ? WHERE name = ?')
        .run(wasPaused ? job.paused_at : now, until, i.reason ?? null, i.by, i.job);
      const version = bumpVersion(s, i.job, now);
      const seq = recordEventSync(
        s,
        {
          job: i.job,
          kind: 'paused',
          owner: i.by,
          hostTime: i.hostTime,
          detail: {
            reason: i.reason,
            until: iso(until),
            by: i.by,
            version,
            previous_version: job.version,
            was_paused: wasPaused,
          },
        },
        now,
      );
      return {
        status: 'done',
        version,
        seq: String(seq),
        dbNow: new Date(now),
        pausedUntil: until === null ? null : new Date(until),
      };
    })
    .immediate();
}

export async function resume(s: Sqlite, i: OperatorWrite): Promise<OperatorResult> {
  return s.db
    .transaction((): OperatorResult => {
      const now = Date.now();
      const got = operatorJob(s, i, now);
      if ('refused' in got) return got.refused;
      const { job } = got;
      if (!isPaused(job, now)) return { status: 'noop', version: job.version, seq: null, dbNow: new Date(now) };
      s.db.prepare('UPDATE jobs SET paused_until = ? WHERE name = ?').run(now, i.job);
      const version = bumpVersion(s, i.job, now);
      const seq = recordEventSync(
        s,
        {
          job: i.job,
          kind: 'resumed',
          owner: i.by,
          hostTime: i.hostTime,
          detail: {
            by: i.by,
            version,
            previous_version: job.version,
            paused_at: iso(job.paused_at),
            paused_by: job.paused_by,
            reason: job.pause_reason,
          },
        },
        now,
      );
      return { status: 'done', version, seq: String(seq), dbNow: new Date(now) };
    })
    .immediate();
}
