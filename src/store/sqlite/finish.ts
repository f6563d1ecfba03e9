// The finish of a run: its window's outcome and the lease released, or the loss recorded (as sql/functions/finish.sql).
import type { FinishInput } from '../contract.js';
import { type LeaseRecord, type Sqlite, expired, hostMonotonicMs, hostOf } from './context.js';
import { recordEventSync } from './record-event.js';

/** See LeaseStore.abandon. */
export async function abandon(s: Sqlite, job: string, owner: string, hostTime: Date): Promise<string | undefined> {
  const lease = s.db
    .prepare('SELECT * FROM leases WHERE name = ? AND owner = ? AND released_at IS NULL')
    .get(job, owner) as LeaseRecord | undefined;
  if (!lease || expired(s, lease, hostMonotonicMs())) return undefined;
  const { held } = await finish(s, {
    job,
    owner,
    generation: String(lease.generation),
    window: lease.window_key ?? undefined,
    outcome: 'none',
    hostTime,
  });
  return held ? String(lease.generation) : undefined;
}

export async function finish(s: Sqlite, i: FinishInput): Promise<{ held: boolean; dbNow: Date }> {
  return s.db
    .transaction(() => {
      const now = Date.now();
      const nowMono = hostMonotonicMs();
      const lease = s.db
        .prepare('SELECT * FROM leases WHERE name = ? AND owner = ? AND generation = ?')
        .get(i.job, i.owner, Number(i.generation)) as LeaseRecord | undefined;
      const held = lease !== undefined && !expired(s, lease, nowMono);
      // A retry of a finish that committed: this generation released the lease itself, whoever
      // has taken it since (as sql/008_finish_after_takeover.sql).
      if (
        !held &&
        s.db
          .prepare(
            `SELECT 1 FROM events WHERE job = ? AND generation = ? AND owner = ? AND kind = 'released' AND
              json_extract(detail, '$.by') IS NULL`,
          )
          .get(i.job, Number(i.generation), i.owner) !== undefined
      )
        return { held: true, dbNow: new Date(now) };
      const detail = i.detail ?? {};
      if (
        held &&
        i.window !== undefined &&
        (i.outcome === 'completed' || i.outcome === 'failed' || i.outcome === 'replaced')
      ) {
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
            window: i.window,
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
      }
      if (typeof detail.offset_ms === 'number') {
        s.db
          .prepare(
            `INSERT INTO hosts (host, offset_ms, uncertainty_ms, measured_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (host) DO UPDATE SET offset_ms = excluded.offset_ms, uncertainty_ms = excluded.uncertainty_ms,
           measured_at = excluded.measured_at`,
          )
          .run(hostOf(i.owner), detail.offset_ms, Number(detail.uncertainty_ms ?? 0), now);
      }
      if (held) {
        s.db
          .prepare('UPDATE leases SET expires_mono = ?, released_at = ? WHERE name = ? AND generation = ?')
          .run(nowMono, now, i.job, Number(i.generation));
        recordEventSync(
          s,
          {
            job: i.job,
            kind: 'released',
            window: i.window,
            owner: i.owner,
            generation: i.generation,
            hostTime: i.hostTime,
          },
          now,
        );
      } else {
        recordLostSync(s, i, detail.aborted, now);
      }
      return { held, dbNow: new Date(now) };
    })
    .immediate();
}

/**
 * finish() and finishWindow() after the lease was lost: the window stays open for whoever
 * holds the lease now, its outcome `lost`, and the loss recorded (once per generation).
 */
export function recordLostSync(s: Sqlite, i: FinishInput, aborted: unknown, now: number): void {
  s.db
    .prepare(
      `UPDATE windows SET outcome = 'lost', finished_at = ? WHERE job = ? AND window_key = ? AND generation = ? AND completed_at IS NULL`,
    )
    .run(now, i.job, i.window ?? null, Number(i.generation));
  recordEventSync(
    s,
    {
      job: i.job,
      kind: 'lease-lost',
      window: i.window,
      owner: i.owner,
      generation: i.generation,
      hostTime: i.hostTime,
      detail: { outcome: i.outcome, aborted },
    },
    now,
  );
}
