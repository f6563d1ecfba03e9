// A lease released by an operator (as sql/functions/release_lease.sql).
import type { OperatorResult, ReleaseInput } from '../contract.js';
import { type LeaseRecord, type Sqlite, expired, hostMonotonicMs, hostOf, pidAlive } from './context.js';
import { bumpVersion, operatorJob } from './operator-job.js';
import { recordEventSync } from './record-event.js';

/**
 * As release_lease (027): the released generation's attempt still running is lost, in the
 * release's transaction, so it spends the attempt budget as a crash taken over does.
 */
function loseRunningAttempt(s: Sqlite, job: string, generation: number, now: number): void {
  s.db
    .prepare(
      `UPDATE windows SET outcome = 'lost', finished_at = ?
        WHERE job = ? AND generation = ? AND completed_at IS NULL AND outcome = 'running'`,
    )
    .run(now, job, generation);
}

export async function releaseLease(s: Sqlite, i: ReleaseInput): Promise<OperatorResult> {
  return s.db
    .transaction((): OperatorResult => {
      const now = Date.now();
      const nowMono = hostMonotonicMs();
      const got = operatorJob(s, i, now);
      if ('refused' in got) return got.refused;
      const { job } = got;
      const lease = s.db.prepare('SELECT * FROM leases WHERE name = ?').get(i.job) as LeaseRecord | undefined;
      if (!lease || expired(s, lease, nowMono))
        return { status: 'noop', version: job.version, seq: null, dbNow: new Date(now) };
      const holder = {
        holder: lease.owner,
        holderGeneration: String(lease.generation),
        holderWindow: lease.window_key,
      };
      // As acquire judges a stale holder: renewal overdue by half an interval, or its process gone.
      const live =
        !(nowMono > lease.renewed_mono + lease.renew_interval_ms * 1.5) &&
        !(lease.holder_pid !== null && hostOf(lease.owner) === s.host && !pidAlive(lease.holder_pid));
      if (live && !i.force)
        return { status: 'busy', version: job.version, seq: null, dbNow: new Date(now), ...holder, live };
      s.db.prepare('UPDATE leases SET expires_mono = ?, released_at = ? WHERE name = ?').run(nowMono, now, i.job);
      loseRunningAttempt(s, i.job, lease.generation, now);
      const version = bumpVersion(s, i.job, now);
      // detail.by stays 'admin': finish tells an owner's own release from this one by it.
      const seq = recordEventSync(
        s,
        {
          job: i.job,
          kind: 'released',
          window: lease.window_key ?? undefined,
          owner: lease.owner,
          generation: String(lease.generation),
          hostTime: i.hostTime,
          detail: { by: 'admin', operator: i.by, forced: i.force && live, live, version },
        },
        now,
      );
      return { status: 'done', version, seq: String(seq), dbNow: new Date(now), ...holder, live };
    })
    .immediate();
}

/** See LeaseStore.release (an administrative release without the operator's checks). */
export async function release(
  s: Sqlite,
  job: string,
  hostTime: Date,
): Promise<{ owner: string; generation: string } | undefined> {
  return s.db
    .transaction(() => {
      const now = Date.now();
      const nowMono = hostMonotonicMs();
      const lease = s.db.prepare('SELECT * FROM leases WHERE name = ?').get(job) as LeaseRecord | undefined;
      if (!lease || expired(s, lease, nowMono)) return undefined;
      s.db.prepare('UPDATE leases SET expires_mono = ?, released_at = ? WHERE name = ?').run(nowMono, now, job);
      loseRunningAttempt(s, job, lease.generation, now);
      recordEventSync(
        s,
        {
          job,
          kind: 'released',
          window: lease.window_key ?? undefined,
          owner: lease.owner,
          generation: String(lease.generation),
          hostTime,
          detail: { by: 'admin' },
        },
        now,
      );
      return { owner: lease.owner, generation: String(lease.generation) };
    })
    .immediate();
}
