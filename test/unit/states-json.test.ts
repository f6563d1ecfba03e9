import { describe, expect, it } from 'vitest';
import { statesToJson, type JobState } from '../../src/monitor/job-states.js';

function state(over: Partial<JobState>): JobState {
  return {
    name: 'a',
    schedule: '0 * * * *',
    tz: 'America/Sao_Paulo',
    windowMode: 'schedule',
    windowFormat: null,
    windowOffset: null,
    alertAfterMs: null,
    alertLookbackMs: null,
    createdAt: new Date('2026-10-31T15:29:30.057Z'),
    owner: 'host1:1:x',
    generation: '101',
    held: false,
    expiresInMs: null,
    heldForMs: null,
    lastWindow: 'w0',
    lastCompletedAt: new Date('2026-11-30T15:29:35.147Z'),
    lastDurationMs: 5000,
    openWindows: [],
    holder: null,
    overdue: true,
    notCompleted: [],
    notCompletedCount: 0,
    intervalMs: 3_600_000,
    due: {
      window: '2026-11-30T12:00:00-03:00',
      scheduledAt: new Date('2026-11-30T15:00:00.000Z'),
      overdueSince: new Date('2026-11-30T15:30:00.000Z'),
      completed: false,
    },
    ...over,
  };
}

describe('statesToJson', () => {
  it('prints exactly what JSON.stringify(doc, null, 2) prints, instants included', () => {
    const shared = new Date('2026-11-30T15:00:00.000Z'); // due instants are shared by the jobs of a schedule
    const jobs = [
      state({}),
      state({
        name: 'b"\\quoted\u2028',
        held: true,
        holder: 'h:2:y',
        expiresInMs: 49_923,
        heldForMs: 70_077,
        openWindows: [{ window: 'w1', attempts: 2, outcome: 'failed' }],
      }),
      state({ name: 'c', lastCompletedAt: null, lastWindow: null, due: undefined, overdue: false, intervalMs: null }),
      state({ name: 'd', due: { window: 'x', scheduledAt: shared, overdueSince: shared, completed: true } }),
      state({ name: 'e', due: { window: 'x', scheduledAt: shared, overdueSince: shared, completed: true } }),
      state({
        name: 'f',
        notCompleted: [
          { window: 'x', scheduledAt: shared, overdueSince: shared, outcome: 'failed' },
          { window: 'y', scheduledAt: shared, overdueSince: shared, outcome: 'no run' },
        ],
      }),
    ];
    const doc = {
      store: 'postgresql',
      location: 'postgres://u:***@h/db schema s',
      dbNow: new Date('2026-11-30T15:40:00.000Z'),
      jobs,
    };
    const expected = JSON.stringify(doc, null, 2);
    const printed = statesToJson(doc);
    expect(printed).toBe(expected);
    // Instants as ISO strings, a shared one in every job that has it, nulls as null.
    const parsed = JSON.parse(printed);
    expect(parsed.jobs[3].due).toEqual({
      window: 'x',
      scheduledAt: '2026-11-30T15:00:00.000Z',
      overdueSince: '2026-11-30T15:00:00.000Z',
      completed: true,
    });
    expect(parsed.jobs[4].due.overdueSince).toBe('2026-11-30T15:00:00.000Z');
    expect(parsed.jobs[2]).toMatchObject({ lastCompletedAt: null, createdAt: '2026-10-31T15:29:30.057Z' });
    expect(parsed.dbNow).toBe('2026-11-30T15:40:00.000Z');
  });
});
