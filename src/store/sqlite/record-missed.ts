// Windows recorded missed (as sql/functions/record_missed.sql).
import type { RecordMissedInput } from '../contract.js';
import { type Sqlite, hostMonotonicMs } from './context.js';
import { recordEventSync } from './record-event.js';
import { heldLease } from './renew.js';

/** A window recorded missed unless final (and, with `again`, even when missed already); whether it was. */
export function markMissed(
  s: Sqlite,
  job: string,
  owner: string,
  generation: string,
  key: string,
  scheduledAt: Date | undefined,
  now: number,
  again: boolean,
): boolean {
  const r = s.db
    .prepare(
      `INSERT INTO windows (job, window_key, scheduled_at, owner, generation, attempts, first_started_at, started_at,
        finished_at, outcome)
     VALUES (@job, @key, @at, @owner, @generation, 0, @now, @now, @now, 'missed')
     ON CONFLICT (job, window_key) DO UPDATE SET outcome = 'missed', finished_at = @now
     WHERE completed_at IS NULL AND (@again OR outcome <> 'missed')`,
    )
    .run({
      job,
      key,
      at: scheduledAt?.getTime() ?? null,
      owner,
      generation: Number(generation),
      now,
      again: again ? 1 : 0,
    });
  return r.changes === 1;
}

/** See LeaseStore.recordMissed. */
export async function recordMissed(s: Sqlite, i: RecordMissedInput): Promise<number | undefined> {
  return s.db
    .transaction((): number | undefined => {
      const now = Date.now();
      if (!heldLease(s, i.job, i.owner, i.generation, hostMonotonicMs())) return undefined;
      let n = 0;
      for (const w of i.windows) {
        if (!markMissed(s, i.job, i.owner, i.generation, w.key, w.scheduledAt, now, false)) continue;
        n += 1;
        recordEventSync(
          s,
          {
            job: i.job,
            kind: 'window-missed',
            window: w.key,
            owner: i.owner,
            generation: i.generation,
            hostTime: i.hostTime,
            detail: { scheduled_at: w.scheduledAt?.toISOString(), reason: i.reason },
          },
          now,
        );
      }
      return n;
    })
    .immediate();
}
