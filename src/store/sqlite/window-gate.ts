// Whether a window may run now, and if not why (as sql/functions/window_gate.sql).
import { type JobRecord, type Sqlite, isPaused } from './context.js';

/**
 * Whether a window may run now, and if not why: as sql/020's window_gate (done, retention,
 * paused, max-delay), the one decision acquire and claimWindow make, inside their immediate
 * transaction. A new condition is one more branch here.
 */
export function windowGate(
  s: Sqlite,
  i: {
    job: string;
    window?: string | undefined;
    scheduledAt?: Date | undefined;
    rerun: boolean;
    maxDelayMs?: number | undefined;
  },
  now: number,
): {
  reason: 'done' | 'retention' | 'paused' | 'max-delay' | null;
  completedAt: Date | null;
  retainedFrom: number | null;
} {
  const r = { completedAt: null, retainedFrom: null };
  if (i.window !== undefined && !i.rerun) {
    const w = s.db.prepare('SELECT completed_at FROM windows WHERE job = ? AND window_key = ?').get(i.job, i.window) as
      { completed_at: number | null } | undefined;
    if (w?.completed_at != null) return { ...r, reason: 'done', completedAt: new Date(w.completed_at) };
    const horizon = s.db.prepare('SELECT retained_from FROM retention WHERE job = ?').pluck().get(i.job) as
      number | null | undefined;
    if (i.scheduledAt && horizon != null && i.scheduledAt.getTime() < horizon)
      return { ...r, reason: 'retention', retainedFrom: horizon };
  }
  const job = s.db.prepare('SELECT paused_at, paused_until FROM jobs WHERE name = ?').get(i.job) as
    Pick<JobRecord, 'paused_at' | 'paused_until'> | undefined;
  if (job && isPaused(job, now)) return { ...r, reason: 'paused' };
  if (
    i.window !== undefined &&
    i.maxDelayMs !== undefined &&
    i.scheduledAt &&
    now - i.scheduledAt.getTime() > i.maxDelayMs
  )
    return { ...r, reason: 'max-delay' };
  return { ...r, reason: null };
}
