// The reads behind `leasejob check`'s replication report: the server's settings, its standbys and
// the fence (sql/functions/fence_status.sql), judged in src/replication.ts.
import type { ReplicationReadings, ReplicationReport } from '../../replication.js';
import type { Pg } from './context.js';

/** See LeaseStore.readReplication: each part read on its own, so what is refused leaves the rest. */
export async function readReplication(db: Pg): Promise<ReplicationReport> {
  const x: ReplicationReadings = { errors: {} };
  const why = (err: unknown): string =>
    `${(err as Error).message}${(err as { code?: string }).code ? ` (SQLSTATE ${(err as { code?: string }).code})` : ''}`;
  try {
    const { rows } = await db.query(
      `SELECT current_user AS role, pg_is_in_recovery() AS recovery,
              current_setting('synchronous_standby_names') AS names, current_setting('synchronous_commit') AS commit`,
      [],
    );
    x.role = rows[0].role;
    x.inRecovery = rows[0].recovery;
    x.synchronousStandbyNames = rows[0].names;
    x.synchronousCommit = rows[0].commit;
  } catch (err) {
    x.errors.settings = why(err);
  }
  try {
    // A role without pg_read_all_stats sees one row per standby, its details NULL.
    const { rows } = await db.query(
      `SELECT count(*)::int AS n, count(*) FILTER (WHERE sync_state IN ('sync', 'quorum'))::int AS sync,
              count(*) FILTER (WHERE state IS NULL)::int AS hidden
         FROM pg_stat_replication`,
      [],
    );
    x.senders = { n: rows[0].n, sync: rows[0].sync, hidden: rows[0].hidden };
  } catch (err) {
    x.errors.senders = why(err);
  }
  try {
    const { rows } = await db.query(`SELECT epoch, server_timeline FROM ${db.s}.fence_status()`, []);
    if (rows[0])
      x.fence = {
        epoch: Number(rows[0].epoch),
        timeline: rows[0].server_timeline === null ? null : Number(rows[0].server_timeline),
      };
  } catch (err) {
    // 42883: the schema predates migration 011.
    x.errors.fence =
      (err as { code?: string }).code === '42883'
        ? 'the schema predates migration 011 (tokens do not yet follow a failover): run `leasejob migrate`'
        : why(err);
  }
  // Loaded here: `run` never asks.
  const { judgeReplication } = await import('../../replication.js');
  return judgeReplication(x);
}
