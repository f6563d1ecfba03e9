// A window claimed for a generation: the acquire's own, or one of a sequence's (as sql/functions/claim_window.sql).
import {
  type AcquireInput,
  type AttemptBudget,
  type ClaimWindowInput,
  type ClaimWindowRow,
  claimedAs,
} from '../contract.js';
import { budgetRefusal } from './attempt-budget.js';
import { type Sqlite, hostMonotonicMs } from './context.js';
import { recordEventSync } from './record-event.js';
import { markMissed } from './record-missed.js';
import { heldLease } from './renew.js';
import { windowGate } from './window-gate.js';

/**
 * A window claimed for `generation` (acquire's own, or one of a sequence's): its row started
 * again, its attempt counted; undefined when it is completed and this is not a rerun.
 */
export function claimRow(
  s: Sqlite,
  i: AttemptBudget & {
    job: string;
    window: string;
    scheduledAt?: Date | undefined;
    owner: string;
    rerun?: boolean | undefined;
    detail?: Record<string, unknown> | undefined;
  },
  generation: number,
  now: number,
): { attempts: number } | undefined {
  // claimed_as: the latest claim's (a run's own resets it), as PostgreSQL's claim_window().
  return s.db
    .prepare(
      `INSERT INTO windows (job, window_key, scheduled_at, owner, generation, first_started_at, started_at, max_attempts,
         claimed_as)
       VALUES (@job, @window, @scheduled, @owner, @generation, @now, @now, @max, @claimedAs)
       ON CONFLICT (job, window_key) DO UPDATE SET owner = @owner, generation = @generation, attempts = attempts + 1,
         started_at = @now, finished_at = NULL, completed_at = NULL, outcome = 'running', exit_code = NULL,
         scheduled_at = coalesce(scheduled_at, @scheduled), max_attempts = @max, claimed_as = @claimedAs
       WHERE completed_at IS NULL OR @rerun
       RETURNING attempts`,
    )
    .get({
      job: i.job,
      window: i.window,
      scheduled: i.scheduledAt?.getTime() ?? null,
      owner: i.owner,
      generation,
      now,
      rerun: i.rerun ? 1 : 0,
      max: i.maxAttempts ?? null,
      claimedAs: claimedAs(i.detail),
    }) as { attempts: number } | undefined;
}

/** The acquire's own window claimed for `generation`: its attempt. */
export function claimOwnWindow(s: Sqlite, i: AcquireInput, generation: number, now: number): number {
  // A run's own claim: claimed_as reset, whatever claimed the window before.
  const claimed = claimRow(s, { ...i, window: i.window!, detail: undefined }, generation, now);
  if (!claimed)
    throw new Error('window completed while its lease was free (cannot happen inside one immediate transaction)');
  const attempt = claimed.attempts;
  recordEventSync(
    s,
    {
      job: i.job,
      kind: 'window-claimed',
      window: i.window,
      owner: i.owner,
      generation: String(generation),
      hostTime: i.hostTime,
      detail: { attempt, scheduled_at: i.scheduledAt?.toISOString(), rerun: i.rerun },
    },
    now,
  );
  return attempt;
}

/** See LeaseStore.claimWindow; as sql/013_catch_up.sql's claim_window. */
export async function claimWindow(s: Sqlite, i: ClaimWindowInput): Promise<ClaimWindowRow> {
  return s.db
    .transaction((): ClaimWindowRow => {
      const now = Date.now();
      const none = { attempt: null, completedAt: null, dbNow: new Date(now) };
      if (!heldLease(s, i.job, i.owner, i.generation, hostMonotonicMs())) return { ...none, outcome: 'not-held' };
      const gate = windowGate(s, i, now);
      if (gate.reason === 'done') return { ...none, outcome: 'done', completedAt: gate.completedAt };
      if (gate.reason === 'paused') {
        // As sql/020's window_refused: the sequence stops; this window stays open for after the resume.
        recordEventSync(
          s,
          {
            job: i.job,
            kind: 'paused-skip',
            window: i.window,
            owner: i.owner,
            generation: i.generation,
            hostTime: i.hostTime,
            detail: { scheduled_at: i.scheduledAt?.toISOString(), reason: 'paused' },
          },
          now,
        );
        return { ...none, outcome: 'paused' };
      }
      if (gate.reason === 'retention' || gate.reason === 'max-delay') {
        const why =
          gate.reason === 'retention'
            ? { retained_from: new Date(gate.retainedFrom!).toISOString() }
            : { max_delay_ms: i.maxDelayMs };
        markMissed(s, i.job, i.owner, i.generation, i.window, i.scheduledAt, now, true);
        recordEventSync(
          s,
          {
            job: i.job,
            kind: 'window-missed',
            window: i.window,
            owner: i.owner,
            generation: i.generation,
            hostTime: i.hostTime,
            detail: { scheduled_at: i.scheduledAt?.toISOString(), ...why, reason: gate.reason },
          },
          now,
        );
        return { ...none, outcome: 'missed' };
      }
      const refused = budgetRefusal(s, i, i.window, i.generation, now);
      if (refused) return { ...none, outcome: refused.outcome, attempt: refused.attempt, nextAt: refused.expiresAt };
      // The gate above found the window open (or a rerun): it is claimed.
      const claimed = claimRow(s, i, Number(i.generation), now)!;
      s.db.prepare('UPDATE leases SET window_key = ? WHERE name = ?').run(i.window, i.job);
      recordEventSync(
        s,
        {
          job: i.job,
          kind: 'window-claimed',
          window: i.window,
          owner: i.owner,
          generation: i.generation,
          hostTime: i.hostTime,
          detail: {
            ...(i.detail ?? {}),
            attempt: claimed.attempts,
            scheduled_at: i.scheduledAt?.toISOString(),
            rerun: i.rerun,
          },
        },
        now,
      );
      return { ...none, outcome: 'claimed', attempt: claimed.attempts };
    })
    .immediate();
}
