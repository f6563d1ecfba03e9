// The replication judgement of `check` and the exporter, from what the server let leasejob read:
// every combination of hidden and visible parts gives a report, never an exception.
import { describe, expect, it } from 'vitest';
import {
  judgeReplication,
  replicationProblems,
  replicationSummary,
  type ReplicationReadings,
} from '../../src/replication.js';

const primary = (over: Partial<ReplicationReadings> = {}): ReplicationReadings => ({
  role: 'leasejob',
  inRecovery: false,
  synchronousStandbyNames: '',
  synchronousCommit: 'on',
  senders: { n: 0, sync: 0, hidden: 0 },
  fence: { epoch: 0, timeline: 1 },
  errors: {},
  ...over,
});

describe('replication judgement', () => {
  it('a lone primary is healthy, an asynchronous standby a warning, a standby critical', () => {
    expect(replicationProblems(judgeReplication(primary()))).toEqual([]);
    expect(judgeReplication(primary()).mode).toBe('single');
    const asyncR = judgeReplication(primary({ senders: { n: 2, sync: 0, hidden: 0 } }));
    expect(asyncR.mode).toBe('asynchronous');
    expect(replicationProblems(asyncR)).toEqual([
      expect.objectContaining({
        severity: 'warning',
        message: expect.stringContaining('primary with 2 asynchronous standby(s)'),
      }),
    ]);
    const standby = judgeReplication(primary({ inRecovery: true, fence: { epoch: 0, timeline: null } }));
    expect(standby).toMatchObject({ mode: 'standby', unchecked: [] });
    expect(replicationProblems(standby)[0]).toMatchObject({ severity: 'critical' });
  });

  it('synchronous: healthy with a standby in sync; critical with none; a warning with synchronous_commit = local', () => {
    const sync = judgeReplication(
      primary({ synchronousStandbyNames: 'ANY 1 (a, b)', senders: { n: 2, sync: 2, hidden: 0 } }),
    );
    expect(sync).toMatchObject({ mode: 'synchronous', synchronousStandbys: 2 });
    expect(replicationProblems(sync)).toEqual([]);
    expect(replicationSummary(sync)).toBe(
      "primary, synchronous (2 of 2 standby(s) synchronous, synchronous_standby_names = 'ANY 1 (a, b)'), timeline 1, fence epoch 0",
    );
    const none = judgeReplication(primary({ synchronousStandbyNames: 'a', senders: { n: 0, sync: 0, hidden: 0 } }));
    expect(replicationProblems(none)).toEqual([
      expect.objectContaining({
        severity: 'critical',
        message: expect.stringContaining('no standby is connected in sync'),
      }),
    ]);
    const local = judgeReplication(
      primary({ synchronousStandbyNames: 'a', synchronousCommit: 'local', senders: { n: 1, sync: 1, hidden: 0 } }),
    );
    expect(replicationProblems(local)).toEqual([
      expect.objectContaining({ severity: 'warning', message: expect.stringContaining('synchronous_commit = local') }),
    ]);
  });

  it('what is hidden is said, and judged no further than what can be read', () => {
    // Details hidden, names set: synchronous, not known how many are in sync.
    const hidden = judgeReplication(primary({ synchronousStandbyNames: 'a', senders: { n: 1, sync: 0, hidden: 1 } }));
    expect(hidden).toMatchObject({ mode: 'synchronous', synchronousStandbys: null });
    expect(replicationProblems(hidden)).toEqual([]);
    expect(hidden.unchecked).toEqual([
      expect.stringContaining('hides the details of 1 standby connection(s) from role leasejob (grant it pg_monitor'),
    ]);
    // Nothing readable at all: unknown, one sentence per part, no problem.
    const nothing = judgeReplication({
      errors: { settings: 'permission denied', senders: 'permission denied', fence: 'permission denied' },
    });
    expect(nothing.mode).toBe('unknown');
    expect(nothing.unchecked).toHaveLength(3);
    expect(replicationProblems(nothing)).toEqual([]);
    // The timeline hidden on a primary: tokens cannot follow a failover.
    const noTimeline = judgeReplication(primary({ fence: { epoch: 0, timeline: null } }));
    expect(noTimeline.unchecked).toEqual([expect.stringContaining("the server's timeline: hidden")]);
  });
});
