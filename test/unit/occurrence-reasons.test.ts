// The reason an occurrence ended as (monitor/occurrences.ts), for the cases the CLI test does not
// make: caught up, replaced, missed by --catch-up-limit, a lost run at its budget, skips only.
import { describe, expect, it } from 'vitest';
import { occurrenceReason } from '../../src/monitor/occurrences.js';
import type { HistoryEvent, WindowRow } from '../../src/store/contract.js';

const at = new Date('2026-12-01T00:00:00Z');
const row = (outcome: string, extra: Partial<WindowRow> = {}): WindowRow => ({
  window: 'w',
  scheduledAt: at,
  outcome,
  attempts: 1,
  generation: '7',
  owner: 'h:1:x',
  firstStartedAt: at,
  startedAt: at,
  finishedAt: at,
  completedAt: null,
  exitCode: null,
  ...extra,
});
const event = (kind: string, detail: Record<string, unknown> = {}): HistoryEvent => ({
  seq: '1',
  kind,
  window: 'w',
  owner: 'h:1:x',
  host: 'h',
  generation: '7',
  dbTime: at,
  hostTime: at,
  detail,
});

describe('occurrenceReason', () => {
  it('a completed window is caught up or backfilled by its latest claim', () => {
    expect(occurrenceReason(row('completed'), [event('window-claimed', { role: 'catch-up' })])).toBe('caught-up');
    expect(occurrenceReason(row('completed'), [event('window-claimed', { backfill: true })])).toBe('backfilled');
    expect(occurrenceReason(row('completed'), [event('window-claimed')])).toBe('completed');
    // A plain rerun after the backfill: the latest claim wins (as the row's claimed_as counts it).
    const backfilled = event('window-claimed', { backfill: true, role: 'backfill' });
    expect(occurrenceReason(row('completed'), [backfilled, event('window-claimed')])).toBe('completed');
    expect(occurrenceReason(row('completed'), [event('window-claimed'), backfilled])).toBe('backfilled');
  });
  it('replaced, missed by --catch-up-limit, and a lost run at its budget', () => {
    expect(occurrenceReason(row('replaced'), [])).toBe('skipped-replaced');
    expect(occurrenceReason(row('missed'), [event('window-missed', { reason: 'catch-up-limit' })])).toBe(
      'missed-catch-up-limit',
    );
    expect(occurrenceReason(row('missed'), [event('window-missed', { reason: 'retention' })])).toBe('missed-other');
    expect(occurrenceReason(row('lost', { attempts: 2, maxAttempts: 2 }), [])).toBe('exhausted');
    expect(occurrenceReason(row('lost', { attempts: 1, maxAttempts: 2 }), [])).toBe('failed');
  });
  it('without a ledger row: the latest skip says why', () => {
    expect(occurrenceReason(undefined, [event('busy-skip'), event('backoff-skip')])).toBe('skipped-backoff');
    expect(occurrenceReason(undefined, [event('busy-skip')])).toBe('skipped-busy');
  });
  it('a window marked by hand (generation 0) is marked whatever its outcome', () => {
    expect(occurrenceReason(row('completed', { generation: '0' }), [event('window-marked')])).toBe('skipped-marked');
    expect(occurrenceReason(row('skipped', { generation: '0' }), [event('paused-skip')])).toBe('skipped-paused');
  });
});
