// The acquire: the gate, the budget, the lease taken or refused, a stale holder taken over (as sql/functions/acquire.sql).
import type { AcquireInput, AcquireRow } from '../contract.js';
import { budgetRefusal } from './attempt-budget.js';
import { claimOwnWindow } from './claim-window.js';
import {
  type JobRecord,
  type LeaseRecord,
  type Sqlite,
  expired,
  hostMonotonicMs,
  hostOf,
  iso,
  pidAlive,
  pidOf,
  wallOf,
} from './context.js';
import { recordEventSync } from './record-event.js';
import { registerJob } from './register-job.js';
import { tokenFloor } from './token-floor.js';
import { windowGate } from './window-gate.js';

export async function acquire(s: Sqlite, i: AcquireInput): Promise<AcquireRow> {
  return s.db.transaction((): AcquireRow => recordSkipSync(s, i, acquireSync(s, i))).immediate();
}

/**
 * As acquire_two_clock()'s skips (sql/functions/acquire_two_clock.sql): the skip an answer means,
 * recorded in the acquiring transaction, as the runner would record it (runner.ts skipEvent).
 */
function recordSkipSync(s: Sqlite, i: AcquireInput, row: AcquireRow): AcquireRow {
  if (!i.recordSkips) return row;
  const event = { job: i.job, window: i.window, owner: i.owner, hostTime: i.hostTime };
  if (row.outcome === 'done') {
    const detail = { completed_at: row.completedAt?.toISOString() };
    recordEventSync(s, { ...event, kind: 'done-skip', detail }, Date.now());
    return { ...row, skipRecorded: true };
  }
  if (row.outcome === 'busy' && i.recordSkips.busy) {
    const detail = {
      holder: row.holder,
      holder_generation: row.holderGeneration,
      holder_window: row.holderWindow,
      ...(i.scheduledAt ? { scheduled_at: i.scheduledAt.toISOString() } : {}),
    };
    recordEventSync(s, { ...event, kind: 'busy-skip', detail }, Date.now());
    return { ...row, skipRecorded: true };
  }
  return row;
}

/** acquire() inside its immediate transaction: nothing (a pause, a prune, a finish) comes between decision and lease. */
export function acquireSync(s: Sqlite, i: AcquireInput): AcquireRow {
  const now = Date.now();
  const nowMono = hostMonotonicMs();
  const jobChanged = i.spec ? registerJob(s, i, now) : undefined;
  const none = {
    generation: null,
    attempt: null,
    dbNow: new Date(now),
    holder: null,
    holderGeneration: null,
    holderWindow: null,
    expiresAt: null,
    completedAt: null,
    ...(jobChanged ? { jobChanged } : {}),
  };
  const gated = gateAcquire(s, i, now);
  if (gated) return { ...none, ...gated };
  // As sql/024 (acquire, attempt_budget): the budget and the backoff, before the lease.
  const refused = budgetRefusal(s, i, i.window, undefined, now);
  if (refused) return { ...none, ...refused };

  const prev = s.db.prepare('SELECT * FROM leases WHERE name = ?').get(i.job) as LeaseRecord | undefined;
  if (prev && !expired(s, prev, nowMono)) {
    // Slack of half an interval absorbs a slow renewal; a holder on this host whose process
    // is gone crashed, whatever its last renewal says.
    const overdue = nowMono > prev.renewed_mono + prev.renew_interval_ms * 1.5;
    const dead = prev.holder_pid !== null && hostOf(prev.owner) === s.host && !pidAlive(prev.holder_pid);
    return {
      ...none,
      outcome: overdue || dead ? 'stale' : 'busy',
      ...(dead ? { holderGone: true } : {}),
      holder: prev.owner,
      holderGeneration: String(prev.generation),
      holderWindow: prev.window_key,
      expiresAt: wallOf(prev.expires_mono, nowMono, now),
    };
  }
  const generation = takeLease(s, i, prev, now, nowMono);
  // Asked again: an abandoned attempt found by the takeover (now lost) counts, as in sql/024.
  const spent = budgetRefusal(s, i, i.window, String(generation), now);
  if (spent) {
    s.db.prepare('UPDATE leases SET released_at = ?, expires_mono = ? WHERE name = ?').run(now, nowMono, i.job);
    return { ...none, ...spent };
  }
  const attempt = i.window !== undefined ? claimOwnWindow(s, i, generation, now) : 1;
  return { ...none, outcome: 'acquired', generation: String(generation), attempt };
}

/**
 * As sql/020's window_gate: the window done, before the retention horizon, the job paused, or
 * the occurrence past --max-delay: what the acquire answers instead of a lease (undefined: go on).
 */
export function gateAcquire(
  s: Sqlite,
  i: AcquireInput,
  now: number,
): { outcome: 'done'; completedAt: Date | null } | { outcome: 'missed' | 'paused' } | undefined {
  const gate = windowGate(s, i, now);
  if (gate.reason === 'done') return { outcome: 'done', completedAt: gate.completedAt };
  if (gate.reason === 'retention' && i.window !== undefined && i.scheduledAt) {
    recordOwnMissed(s, i, i.scheduledAt, now, {
      retained_from: new Date(gate.retainedFrom!).toISOString(),
      reason: 'retention',
    });
    return { outcome: 'missed' };
  }
  // As sql/012 (acquire, skip_paused): a paused job takes no lease and runs nothing; its
  // occurrence is recorded as skipped when it has no window yet.
  const job = s.db.prepare('SELECT * FROM jobs WHERE name = ?').get(i.job) as JobRecord | undefined;
  if (job && gate.reason === 'paused') {
    recordPausedSkip(s, i, job, now);
    return { outcome: 'paused' };
  }
  if (gate.reason === 'max-delay' && i.window !== undefined && i.scheduledAt) {
    recordOwnMissed(s, i, i.scheduledAt, now, { max_delay_ms: i.maxDelayMs, reason: 'max-delay' });
    return { outcome: 'missed' };
  }
  return undefined;
}

/** The acquire's own occurrence recorded missed (its window, if it has none yet, and the event). */
export function recordOwnMissed(
  s: Sqlite,
  i: AcquireInput,
  scheduledAt: Date,
  now: number,
  detail: Record<string, unknown>,
): void {
  s.db
    .prepare(
      `INSERT INTO windows (job, window_key, scheduled_at, owner, generation, attempts, first_started_at, started_at,
         finished_at, outcome)
       VALUES (?, ?, ?, ?, 0, 0, ?, ?, ?, 'missed') ON CONFLICT (job, window_key) DO NOTHING`,
    )
    .run(i.job, i.window, scheduledAt.getTime(), i.owner, now, now, now);
  recordEventSync(
    s,
    {
      job: i.job,
      kind: 'window-missed',
      window: i.window,
      owner: i.owner,
      hostTime: i.hostTime,
      detail: { scheduled_at: scheduledAt.toISOString(), ...detail },
    },
    now,
  );
}

/** A paused job's occurrence: the paused-skip event, and its window skipped when it has none yet. */
export function recordPausedSkip(s: Sqlite, i: AcquireInput, job: JobRecord, now: number): void {
  recordEventSync(
    s,
    {
      job: i.job,
      kind: 'paused-skip',
      window: i.window,
      owner: i.owner,
      hostTime: i.hostTime,
      detail: {
        reason: job.pause_reason,
        paused_by: job.paused_by,
        paused_at: iso(job.paused_at),
        paused_until: iso(job.paused_until),
        scheduled_at: i.scheduledAt?.toISOString(),
      },
    },
    now,
  );
  if (i.window === undefined) return;
  s.db
    .prepare(
      `INSERT INTO windows (job, window_key, scheduled_at, owner, generation, attempts, first_started_at, started_at,
         finished_at, completed_at, outcome)
       VALUES (?, ?, ?, ?, 0, 0, ?, ?, ?, ?, 'skipped') ON CONFLICT (job, window_key) DO NOTHING`,
    )
    .run(i.job, i.window, i.scheduledAt?.getTime() ?? null, i.owner, now, now, now, now);
}

/** The lease taken for the next generation (a free one, or a stale holder's taken over): the generation. */
export function takeLease(
  s: Sqlite,
  i: AcquireInput,
  prev: LeaseRecord | undefined,
  now: number,
  nowMono: number,
): number {
  // Never below the token floor (token-floor.ts): a restored file does not issue a token again.
  const generation = Math.max((prev?.generation ?? 0) + 1, tokenFloor(s, now));
  s.db
    .prepare(
      `INSERT INTO leases (name, owner, generation, acquired_at, renewed_at, released_at, renewed_mono, expires_mono, boot_id,
         ttl_ms, renew_interval_ms, window_key, holder_pid)
       VALUES (@name, @owner, @generation, @now, @now, NULL, @mono, @expires, @boot, @ttl, @renew, @window, @pid)
       ON CONFLICT (name) DO UPDATE SET owner = @owner, generation = @generation, acquired_at = @now, renewed_at = @now,
         released_at = NULL, renewed_mono = @mono, expires_mono = @expires, boot_id = @boot, ttl_ms = @ttl,
         renew_interval_ms = @renew, window_key = @window, holder_pid = @pid`,
    )
    .run({
      name: i.job,
      owner: i.owner,
      generation,
      now,
      mono: nowMono,
      expires: nowMono + i.ttlMs,
      boot: s.boot,
      ttl: i.ttlMs,
      renew: i.renewIntervalMs,
      window: i.window ?? null,
      pid: pidOf(i.owner),
    });
  const takeover = prev !== undefined && prev.released_at === null;
  recordEventSync(
    s,
    {
      job: i.job,
      kind: takeover ? 'stale-takeover' : 'acquired',
      window: i.window,
      owner: i.owner,
      generation: String(generation),
      hostTime: i.hostTime,
      detail: takeover ? { previous_owner: prev.owner, previous_generation: prev.generation } : {},
    },
    now,
  );
  // As sql/007_lost_once.sql: the generation taken over lost its lease, said once, and its
  // unfinished window is lost (not when it was this very runner's unanswered acquisition).
  if (takeover && prev.owner !== i.owner) recordTakenOver(s, i, prev, generation, now);
  return generation;
}

export function recordTakenOver(s: Sqlite, i: AcquireInput, prev: LeaseRecord, generation: number, now: number): void {
  s.db
    .prepare(
      `UPDATE windows SET outcome = 'lost', finished_at = ?
        WHERE job = ? AND generation = ? AND completed_at IS NULL AND outcome = 'running'`,
    )
    .run(now, i.job, prev.generation);
  recordEventSync(
    s,
    {
      job: i.job,
      kind: 'lease-lost',
      window: prev.window_key ?? undefined,
      owner: prev.owner,
      generation: String(prev.generation),
      hostTime: i.hostTime,
      detail: { recorded_by: 'takeover', taken_by: i.owner, taken_generation: generation },
    },
    now,
  );
}
