// Every occurrence accounted for: how each window of a job ended, with a reason from a fixed
// list, derived from the ledger (windows) and the occurrence's own events. No schema of its own.
import {
  claimedAs,
  SKIP_REASONS as SKIPS,
  type HistoryEvent,
  type LeaseStore,
  type OccurrenceCount,
  type WindowRow,
} from '../store/contract.js';

/**
 * The final reasons an occurrence can have (a fixed list: bounded label values). `failed` still
 * has attempts left (or no budget); `exhausted` spent its --max-attempts; `running` is not over.
 */
export const OCCURRENCE_REASONS = [
  'completed',
  'caught-up',
  'backfilled',
  'running',
  'failed',
  'exhausted',
  'skipped-paused',
  'skipped-marked',
  'skipped-busy',
  'skipped-replaced',
  'skipped-backoff',
  'missed-max-delay',
  'missed-catch-up-limit',
  'missed-other',
] as const;
export type OccurrenceReason = (typeof OCCURRENCE_REASONS)[number];

/** One occurrence of a job, as history --by-occurrence shows it. */
export interface Occurrence {
  window: string;
  scheduledAt: Date | null;
  reason: OccurrenceReason;
  /** The ledger's outcome (null: the occurrence has no row, only skip events). */
  outcome: string | null;
  attempts: number;
  maxAttempts: number | null;
  /** Runs that skipped this occurrence, by kind (busy-skip, ...) and host. */
  skips: Record<string, Record<string, number>>;
  /** When it ended (the ledger's finished_at, else its latest event). */
  endedAt: Date | null;
  /** When it was first claimed, or first skipped (an occurrence without scheduledAt is ordered by it). */
  firstSeenAt: Date | null;
}

const SKIP_REASONS: Record<string, OccurrenceReason> = SKIPS;
const MISSED_REASONS: Record<string, OccurrenceReason> = {
  'max-delay': 'missed-max-delay',
  'catch-up-limit': 'missed-catch-up-limit',
};

function lastWhere(events: HistoryEvent[], test: (e: HistoryEvent) => boolean): HistoryEvent | undefined {
  for (let i = events.length - 1; i >= 0; i--) if (test(events[i]!)) return events[i];
  return undefined;
}
const latest = (events: HistoryEvent[], kind: string) => lastWhere(events, (e) => e.kind === kind);

/** By its latest claim, as the ledger row's claimed_as counts it (readOccurrenceCounts). */
function completedReason(events: HistoryEvent[]): OccurrenceReason {
  const as = claimedAs(latest(events, 'window-claimed')?.detail);
  return as === 'backfill' ? 'backfilled' : as === 'catch-up' ? 'caught-up' : 'completed';
}

function missedReason(e: HistoryEvent | undefined): OccurrenceReason {
  const reason = MISSED_REASONS[String(e?.detail.reason)];
  // The embedded store's own missed runs said only the delay before this release.
  return reason ?? (e?.detail.max_delay_ms !== undefined ? 'missed-max-delay' : 'missed-other');
}

/** The reason of one occurrence: its ledger row (if any) and its events in sequence order. */
export function occurrenceReason(row: WindowRow | undefined, events: HistoryEvent[]): OccurrenceReason {
  if (row === undefined) {
    const skip = lastWhere(events, (e) => SKIP_REASONS[e.kind] !== undefined);
    return skip ? SKIP_REASONS[skip.kind]! : 'missed-other';
  }
  // A window handled by hand belongs to the operator (generation 0) from then on.
  if (row.generation === '0' && latest(events, 'window-marked')) return 'skipped-marked';
  switch (row.outcome) {
    case 'running':
      return 'running';
    case 'completed':
      return completedReason(events);
    case 'skipped':
      return latest(events, 'paused-skip') ? 'skipped-paused' : 'skipped-marked';
    case 'replaced': // --on-busy replace: stopped for a later occurrence, an attempt spent (docs/occurrence.md)
    case 'failed':
    case 'lost':
      if (row.maxAttempts != null && row.attempts >= row.maxAttempts) return 'exhausted';
      return row.outcome === 'replaced' ? 'skipped-replaced' : 'failed';
    case 'missed':
      return missedReason(latest(events, 'window-missed'));
    default:
      return 'missed-other';
  }
}

function skipsOf(events: HistoryEvent[]): Occurrence['skips'] {
  const skips: Occurrence['skips'] = {};
  for (const e of events) {
    if (SKIP_REASONS[e.kind] === undefined && e.kind !== 'done-skip') continue;
    const byHost = (skips[e.kind] ??= {});
    const host = e.host ?? '-';
    byHost[host] = (byHost[host] ?? 0) + 1;
  }
  return skips;
}

/** How many of the latest events are read to find occurrences that have no ledger row (skips only). */
const EVENTS_PER_OCCURRENCE = 10;
/** How many events of one occurrence are read to judge it (its claims, tries, skips, its end). */
const EVENTS_OF_ONE = 1000;

/**
 * The job's latest `limit` occurrences, newest scheduled first (one with no scheduled time, e.g.
 * skipped as busy before any row, by when it was first seen): the ledger's windows, and the
 * windows the latest events skipped without a row. One read of the ledger, one of the latest
 * events, and one per occurrence for its events.
 */
export async function readOccurrences(store: LeaseStore, job: string, limit: number): Promise<Occurrence[]> {
  const rows = (await store.readJobWindows?.(job, limit)) ?? [];
  const recent = await store.readHistory(job, limit * EVENTS_PER_OCCURRENCE);
  const byWindow = new Map<string, WindowRow | undefined>(rows.map((r) => [r.window, r]));
  for (const e of recent) {
    if (e.window !== null && !byWindow.has(e.window) && SKIP_REASONS[e.kind] !== undefined)
      byWindow.set(e.window, undefined);
  }
  const found = await Promise.all(
    [...byWindow].map(async ([window, row]) => {
      const events = await store.readHistory(job, EVENTS_OF_ONE, window);
      const at = (e: HistoryEvent | undefined) => e?.detail.scheduled_at;
      const scheduled = row?.scheduledAt ?? (at(events[0]) ? new Date(String(at(events[0]))) : null);
      return {
        window,
        scheduledAt: scheduled,
        reason: occurrenceReason(row, events),
        outcome: row?.outcome ?? null,
        attempts: row?.attempts ?? 0,
        maxAttempts: row?.maxAttempts ?? null,
        skips: skipsOf(events),
        endedAt: row?.finishedAt ?? events.at(-1)?.dbTime ?? null,
        firstSeenAt: row?.firstStartedAt ?? events[0]?.dbTime ?? null,
      } satisfies Occurrence;
    }),
  );
  const key = (o: Occurrence) => o.scheduledAt?.getTime() ?? o.firstSeenAt?.getTime() ?? 0;
  return found.sort((a, b) => key(b) - key(a) || b.window.localeCompare(a.window)).slice(0, limit);
}

/** readOccurrenceCounts' rows as each job's counts by reason (only the reasons it has). */
export function countsByJob(rows: readonly OccurrenceCount[] | undefined): Map<string, Record<string, number>> {
  const byJob = new Map<string, Record<string, number>>();
  for (const r of rows ?? []) {
    const counts = byJob.get(r.job) ?? {};
    counts[r.reason] = Number(r.n);
    byJob.set(r.job, counts);
  }
  return byJob;
}
