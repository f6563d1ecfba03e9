// One event in a job's log, and its count (as sql/functions/record_event.sql).
import type { RecordEventInput } from '../contract.js';
import { type Sqlite, hostOf, stripNulls } from './context.js';

/** One event; as the PostgreSQL store's record_event (sql/007_lost_once.sql), one `lease-lost` per generation (0: not recorded). */
export function recordEventSync(s: Sqlite, e: RecordEventInput, now: number): number {
  if (
    e.kind === 'lease-lost' &&
    s.db
      .prepare("SELECT 1 FROM events WHERE job = ? AND kind = 'lease-lost' AND generation = ?")
      .get(e.job, Number(e.generation))
  )
    return 0;
  const job = s.db
    .prepare(
      `INSERT INTO jobs (name, last_seq, created_at, updated_at) VALUES (?, 1, ?, ?)
     ON CONFLICT (name) DO UPDATE SET last_seq = last_seq + 1 RETURNING last_seq`,
    )
    .get(e.job, now, now) as { last_seq: number };
  const host = hostOf(e.owner);
  s.db
    .prepare(
      `INSERT INTO events (job, seq, kind, window_key, owner, host, generation, db_time, host_time, detail)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    )
    .run(
      e.job,
      job.last_seq,
      e.kind,
      e.window ?? null,
      e.owner ?? null,
      host,
      e.generation === undefined ? null : Number(e.generation),
      now,
      e.hostTime.getTime(),
      JSON.stringify(stripNulls(e.detail ?? {})),
    );
  s.db
    .prepare(
      `INSERT INTO event_counts (job, kind, host, n, last_at) VALUES (?, ?, ?, 1, ?)
     ON CONFLICT (job, kind, host) DO UPDATE SET n = n + 1, last_at = excluded.last_at`,
    )
    .run(e.job, e.kind, host, now);
  return job.last_seq;
}

export async function recordEvent(s: Sqlite, e: RecordEventInput): Promise<string> {
  return String(s.db.transaction(() => recordEventSync(s, e, Date.now())).immediate());
}
