// What the database can promise leases, windows and tokens across a failover: the replication
// setup leasejob sees (a standby; a primary with asynchronous standbys only; synchronous), read
// for `check` and the exporter, and judged into problems. Whatever the server hides from this
// role is said to be unchecked, never guessed and never an error.

export type ReplicationMode =
  /** Connected to a standby (in recovery): runs are refused there (read-only). */
  | 'standby'
  /** A primary that waits for at least one synchronous (or quorum) standby on commit. */
  | 'synchronous'
  /** A primary with streaming standbys, none of them synchronous: a failover can lose commits. */
  | 'asynchronous'
  /** A primary without any streaming standby leasejob can see. */
  | 'single'
  /** The embedded store: one file on one host, no failover. */
  | 'embedded'
  /** Not enough could be read to tell. */
  | 'unknown';

export interface ReplicationReport {
  mode: ReplicationMode;
  /** Streaming standbys seen in pg_stat_replication (null: not readable). */
  standbys: number | null;
  /** Of those, how many are synchronous or in the quorum (null: hidden from this role). */
  synchronousStandbys: number | null;
  /** As the server has it ('' when unset; null: not readable). */
  synchronousStandbyNames: string | null;
  /** This session's setting (null: not readable). */
  synchronousCommit: string | null;
  /** The server's timeline (null: hidden). */
  timeline: number | null;
  /** The epoch the next tokens are issued in (null: schema before 011, or not readable). */
  fenceEpoch: number | null;
  /** What could not be checked, and why: one sentence each. */
  unchecked: string[];
}

export interface ReplicationProblem {
  severity: 'critical' | 'warning';
  message: string;
}

const SYNC_HOWTO =
  "For synchronous replication: in plain PostgreSQL set synchronous_standby_names (e.g. 'ANY 1 " +
  "(standby1, standby2)') with synchronous_commit = on; " +
  'in Patroni set synchronous_mode: true (synchronous_mode_strict: true to refuse writes rather than lose them when no standby is left); ' +
  'in CloudNativePG set spec.postgresql.synchronous (method any, number 1) or minSyncReplicas: 1.';

/** Modes in which commits do not wait for a standby (synchronous_commit = local / off). */
const NO_WAIT_COMMIT = new Set(['local', 'off']);

/** The problems `check` reports for this setup (none: healthy, or nothing known to be wrong). */
export function replicationProblems(r: ReplicationReport): ReplicationProblem[] {
  switch (r.mode) {
    case 'standby':
      return [
        {
          severity: 'critical',
          message:
            'connected to a standby (the server is in recovery): `leasejob run` is refused here ' +
            '(read-only); point leasejob at the primary (the read-write address of the cluster)',
        },
      ];
    case 'asynchronous':
      return [
        {
          severity: 'warning',
          message:
            `primary with ${r.standbys} asynchronous standby(s) and no synchronous replication: a failover ` +
            `can lose the acquisitions, renewals and completed windows ` +
            'the standby had not received (an owner then loses its lease, and a completed window may run again; tokens stay ordered). ' +
            SYNC_HOWTO,
        },
      ];
    case 'synchronous':
      if (r.synchronousStandbys === 0) {
        return [
          {
            severity: 'critical',
            message:
              `synchronous replication is configured (synchronous_standby_names = ` +
              `'${r.synchronousStandbyNames}'), but no standby is connected in sync: ` +
              'every commit waits until one is (runs time out). Bring a standby back, or let the HA manager ' +
              'drop the requirement (Patroni synchronous_mode without synchronous_mode_strict does).',
          },
        ];
      }
      if (r.synchronousCommit !== null && NO_WAIT_COMMIT.has(r.synchronousCommit)) {
        return [
          {
            severity: 'warning',
            message:
              `synchronous replication is configured (synchronous_standby_names = ` +
              `'${r.synchronousStandbyNames}'), but synchronous_commit = ${r.synchronousCommit} for this role: ` +
              `` +
              'its commits do not wait for the standby, and a failover can lose them. Set synchronous_commit ' +
              "= on (or remote_apply) for leasejob's roles.",
          },
        ];
      }
      return [];
    default:
      return [];
  }
}

/** One line for `check`'s text output and logs. */
export function replicationSummary(r: ReplicationReport): string {
  const epoch = r.fenceEpoch === null ? '' : `, fence epoch ${r.fenceEpoch}`;
  const tl = r.timeline === null ? '' : `, timeline ${r.timeline}`;
  switch (r.mode) {
    case 'embedded':
      return 'embedded store: one host, no failover';
    case 'standby':
      return `standby${tl}`;
    case 'single':
      return `primary, no streaming standby seen${tl}${epoch}`;
    case 'asynchronous':
      return `primary, ${r.standbys} asynchronous standby(s)${tl}${epoch}`;
    case 'synchronous':
      return (
        `primary, synchronous (${r.synchronousStandbys ?? '?'} of ${r.standbys ?? '?'} standby(s) ` +
        `synchronous, synchronous_standby_names = '${r.synchronousStandbyNames}')${tl}${epoch}`
      );
    default:
      return `unknown${tl}${epoch}`;
  }
}

/** What the PostgreSQL store read, each part undefined when the server refused it. */
export interface ReplicationReadings {
  role?: string | undefined;
  inRecovery?: boolean | undefined;
  synchronousStandbyNames?: string | undefined;
  synchronousCommit?: string | undefined;
  /** pg_stat_replication: rows, rows in sync/quorum state, rows whose details are hidden. */
  senders?: { n: number; sync: number; hidden: number } | undefined;
  fence?: { epoch: number; timeline: number | null } | undefined;
  /** Why a part could not be read. */
  errors: { settings?: string; senders?: string; fence?: string };
}

/** The report from the readings, saying what could not be checked. */
export function judgeReplication(x: ReplicationReadings): ReplicationReport {
  const unchecked: string[] = [];
  const role = x.role ? `role ${x.role}` : 'this role';
  if (x.errors.settings)
    unchecked.push(`whether the server is a standby and its synchronous settings: ${x.errors.settings}`);
  if (x.errors.senders) unchecked.push(`the standbys (pg_stat_replication): ${x.errors.senders}`);
  else if (x.senders && x.senders.hidden > 0) {
    unchecked.push(
      `which standbys are synchronous: pg_stat_replication hides the details of ${x.senders.hidden} ` +
        `standby connection(s) from ${role} (grant it pg_monitor to see them)`,
    );
  }
  if (x.errors.fence) unchecked.push(`the fence epoch: ${x.errors.fence}`);
  else if (x.fence && x.fence.timeline === null && x.inRecovery !== true) {
    unchecked.push(
      "the server's timeline: hidden (pg_current_wal_lsn/pg_walfile_name not allowed), so tokens " +
        'cannot tell a failover apart; use synchronous replication or a service that loses no commit on ' +
        'failover',
    );
  }
  const names = x.synchronousStandbyNames;
  const senders = x.senders;
  let mode: ReplicationMode = 'unknown';
  if (x.inRecovery === true) mode = 'standby';
  else if (x.inRecovery === false && names !== undefined) {
    // Configured: whether a standby is in sync is judged from the counts (unless hidden, said above).
    if (names.trim() !== '') mode = 'synchronous';
    else if (senders) mode = senders.n > 0 ? 'asynchronous' : 'single';
  }
  return {
    mode,
    standbys: senders?.n ?? null,
    synchronousStandbys: senders && senders.hidden === 0 ? senders.sync : null,
    synchronousStandbyNames: names ?? null,
    synchronousCommit: x.synchronousCommit ?? null,
    timeline: x.fence?.timeline ?? null,
    fenceEpoch: x.fence?.epoch ?? null,
    unchecked,
  };
}
