// run --on-busy replace: the holder of an earlier window asked to stop (as sql/functions/request_replace.sql).
import type { ReplaceAnswer, ReplaceRequest } from '../contract.js';
import { type LeaseRecord, type Sqlite, expired, hostMonotonicMs } from './context.js';
import { recordEventSync } from './record-event.js';

/** See LeaseStore.requestReplace; as sql/functions/request_replace.sql. */
export async function requestReplace(s: Sqlite, i: ReplaceRequest): Promise<ReplaceAnswer> {
  return s.db
    .transaction((): ReplaceAnswer => {
      const now = Date.now();
      const lease = s.db.prepare('SELECT * FROM leases WHERE name = ?').get(i.job) as LeaseRecord | undefined;
      if (!lease || lease.released_at !== null || expired(s, lease, hostMonotonicMs()))
        return { outcome: 'free', holder: null, holderGeneration: null, holderWindow: null };
      const holder = {
        holder: lease.owner,
        holderGeneration: String(lease.generation),
        holderWindow: lease.window_key,
      };
      if (lease.window_key === i.window) return { outcome: 'same-window', ...holder };
      const held = s.db
        .prepare('SELECT scheduled_at FROM windows WHERE job = ? AND window_key = ? AND generation = ?')
        .get(i.job, lease.window_key, lease.generation) as { scheduled_at: number | null } | undefined;
      const heldAt = held?.scheduled_at ?? null;
      if (lease.window_key === null || heldAt === null || heldAt >= i.scheduledAt.getTime())
        return { outcome: 'not-earlier', ...holder };
      if (lease.replace_generation !== lease.generation) {
        s.db
          .prepare('UPDATE leases SET replace_by = ?, replace_window = ?, replace_generation = ? WHERE name = ?')
          .run(i.requester, i.window, lease.generation, i.job);
        recordEventSync(
          s,
          {
            job: i.job,
            kind: 'replace-requested',
            window: lease.window_key,
            owner: lease.owner,
            generation: String(lease.generation),
            hostTime: i.hostTime,
            detail: { by: i.requester, for_window: i.window },
          },
          now,
        );
      }
      return { outcome: 'requested', ...holder };
    })
    .immediate();
}
