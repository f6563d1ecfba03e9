// `check` and the exporter say what the database can promise across a failover, on real
// streaming replication (Debian postgresql-15): a primary with an asynchronous standby (a
// warning), the standby itself (critical: runs are refused there), a synchronous standby
// (healthy), and a role or server that hides what is needed (said as unchecked, never a crash).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, runCli, scrapeOnce } from '../helpers/cli.js';
import { replicationMissing, startReplicaSet } from '../helpers/replication.mjs';

const missing = replicationMissing();
if (missing) console.info(`replication report tests skipped: ${missing}`);
const SCHEMA = 'leasejob';

async function sql(url: string, text: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => {});
  await c.connect();
  try {
    await c.query(text);
  } finally {
    await c.end().catch(() => {});
  }
}

const asRole = (url: string, role: string): string => url.replace('postgres@', `${role}@`);
const check = (url: string, extra: string[] = []) =>
  runCli(['check', '--database-url', url, '--schema', SCHEMA, ...extra]);
const run = (url: string, job: string) =>
  runCli([
    'run',
    '--name',
    job,
    '--database-url',
    url,
    '--schema',
    SCHEMA,
    '--',
    process.execPath,
    fixture('exit-with.mjs'),
    '0',
  ]);

const scrape = (url: string): Promise<string> =>
  scrapeOnce(['--database-url', url, '--schema', SCHEMA], {}, { timeoutMs: 60_000 });
const metricLines = (text: string, prefix: string): string[] => text.split('\n').filter((l) => l.startsWith(prefix));

describe.skipIf(missing !== undefined)(
  'replication setup in check and the exporter (real streaming replication)',
  () => {
    describe('asynchronous standby', () => {
      let rs: Awaited<ReturnType<typeof startReplicaSet>>;
      beforeAll(async () => {
        rs = await startReplicaSet();
        const m = await runCli(['migrate', '--database-url', rs.primary.url, '--schema', SCHEMA]);
        expect(m.exitCode, m.all).toBe(0);
        expect((await run(rs.primary.url, 'r1')).exitCode).toBe(0);
        await sql(rs.primary.url, 'CREATE ROLE runner LOGIN');
        const g = await runCli([
          'migrate',
          '--database-url',
          rs.primary.url,
          '--schema',
          SCHEMA,
          '--grant-to',
          'runner',
        ]);
        expect(g.exitCode, g.all).toBe(0);
      }, 120_000);
      afterAll(async () => rs?.stop());

      it('the primary: a WARNING naming what a failover can lose and how to configure synchronous replication (exit 1); the exporter says asynchronous', async () => {
        const r = await check(rs.primary.url);
        expect(r.exitCode, r.all).toBe(1);
        expect(r.stdout).toMatch(
          /^WARNING \(database\): replication: primary with 1 asynchronous standby\(s\) and no synchronous replication: a failover can lose the acquisitions/m,
        );
        expect(r.stdout).toContain('synchronous_standby_names');
        expect(r.stdout).toContain('Patroni set synchronous_mode: true');
        expect(r.stdout).toContain('CloudNativePG');
        expect(r.stdout).not.toContain('UNCHECKED');
        const j = await check(rs.primary.url, ['--json']);
        expect(JSON.parse(j.stdout).replication).toMatchObject({
          mode: 'asynchronous',
          standbys: 1,
          synchronousStandbys: 0,
          synchronousStandbyNames: '',
          timeline: 1,
          fenceEpoch: 0,
          unchecked: [],
        });
        const text = await scrape(rs.primary.url);
        expect(metricLines(text, 'leasejob_replication_mode{')).toEqual([
          'leasejob_replication_mode{mode="asynchronous"} 1',
        ]);
        expect(metricLines(text, 'leasejob_replication_standbys ')).toEqual(['leasejob_replication_standbys 1']);
        expect(metricLines(text, 'leasejob_replication_synchronous_standbys ')).toEqual([
          'leasejob_replication_synchronous_standbys 0',
        ]);
        expect(metricLines(text, 'leasejob_fence_epoch ')).toEqual(['leasejob_fence_epoch 0']);
        expect(metricLines(text, 'leasejob_replication_unchecked ')).toEqual(['leasejob_replication_unchecked 0']);
      });

      it('a role without pg_monitor: still the warning (no synchronous_standby_names), and what it cannot see is said UNCHECKED', async () => {
        const r = await check(asRole(rs.primary.url, 'runner'));
        expect(r.exitCode, r.all).toBe(1);
        expect(r.stdout).toContain('WARNING (database): replication: primary with 1 asynchronous standby(s)');
        expect(r.stdout).toContain(
          'UNCHECKED (database): replication: which standbys are synchronous: pg_stat_replication hides the details of 1 standby connection(s) from role runner (grant it pg_monitor to see them)',
        );
        expect(r.stderr).not.toMatch(/stack|at .*\.js:\d+/);
      });

      it('the standby: CRITICAL, runs are refused there (exit 2); run itself exits 69 with its clear message', async () => {
        const r = await check(rs.standby.url);
        expect(r.exitCode, r.all).toBe(2);
        expect(r.stdout).toContain(
          'CRITICAL (database): replication: connected to a standby (the server is in recovery): `leasejob run` is refused here (read-only); point leasejob at the primary',
        );
        const text = await scrape(rs.standby.url);
        expect(metricLines(text, 'leasejob_replication_mode{')).toEqual([
          'leasejob_replication_mode{mode="standby"} 1',
        ]);
        const runOnStandby = await run(rs.standby.url, 'r1');
        expect(runOnStandby.exitCode).toBe(69);
        expect(runOnStandby.stderr).toContain('the server is read-only (a standby?): point leasejob at the primary');
      });

      it('a server that hides its timeline and its standbys (a managed service): runs still work, check says what it could not check', async () => {
        // A schema owned by a role that is not a superuser, on a server that grants it neither the
        // WAL functions nor pg_stat_replication.
        await sql(
          rs.primary.url,
          `CREATE ROLE owner_r LOGIN; GRANT CREATE ON DATABASE postgres TO owner_r;
        REVOKE EXECUTE ON FUNCTION pg_current_wal_lsn() FROM PUBLIC; REVOKE SELECT ON pg_stat_replication FROM PUBLIC`,
        );
        const url = asRole(rs.primary.url, 'owner_r');
        const schema = ['--schema', 'hidden'];
        try {
          const m = await runCli(['migrate', '--database-url', url, ...schema]);
          expect(m.exitCode, m.all).toBe(0);
          const r1 = await runCli([
            'run',
            '--name',
            'h',
            '--database-url',
            url,
            ...schema,
            '--',
            process.execPath,
            fixture('exit-with.mjs'),
            '0',
          ]);
          expect(r1.exitCode, r1.all).toBe(0);
          const c = await runCli(['check', '--database-url', url, ...schema, '--json']);
          expect(c.exitCode, c.all).toBe(0);
          const rep = JSON.parse(c.stdout).replication;
          expect(rep).toMatchObject({ mode: 'unknown', standbys: null, timeline: null, fenceEpoch: 0 });
          expect(rep.unchecked).toEqual([
            expect.stringMatching(/^the standbys \(pg_stat_replication\): permission denied/),
            expect.stringMatching(/^the server's timeline: hidden/),
          ]);
          const t = await runCli(['check', '--database-url', url, ...schema]);
          expect(t.stdout).toMatch(/^OK: 1 job\(s\) healthy\nUNCHECKED \(database\): replication: the standbys/);
        } finally {
          await sql(
            rs.primary.url,
            'GRANT EXECUTE ON FUNCTION pg_current_wal_lsn() TO PUBLIC; GRANT SELECT ON pg_stat_replication TO PUBLIC',
          );
        }
      });
    });

    describe('synchronous standby', () => {
      let rs: Awaited<ReturnType<typeof startReplicaSet>>;
      beforeAll(async () => {
        rs = await startReplicaSet({ synchronous: true });
        const m = await runCli(['migrate', '--database-url', rs.primary.url, '--schema', SCHEMA]);
        expect(m.exitCode, m.all).toBe(0);
      }, 120_000);
      afterAll(async () => rs?.stop());

      it('healthy: OK, exit 0; the exporter says synchronous', async () => {
        const r = await check(rs.primary.url);
        expect(r.exitCode, r.all).toBe(0);
        expect(r.stdout).toBe('OK: 0 job(s) healthy');
        const j = JSON.parse((await check(rs.primary.url, ['--json'])).stdout);
        expect(j.replication).toMatchObject({
          mode: 'synchronous',
          standbys: 1,
          synchronousStandbys: 1,
          synchronousStandbyNames: 'FIRST 1 (standby1)',
          unchecked: [],
        });
        const text = await scrape(rs.primary.url);
        expect(metricLines(text, 'leasejob_replication_mode{')).toEqual([
          'leasejob_replication_mode{mode="synchronous"} 1',
        ]);
      });

      it("synchronous_commit = local for leasejob's role: a WARNING that its commits do not wait", async () => {
        await sql(rs.primary.url, 'ALTER ROLE postgres SET synchronous_commit = local');
        try {
          const r = await check(rs.primary.url);
          expect(r.exitCode, r.all).toBe(1);
          expect(r.stdout).toContain(
            'but synchronous_commit = local for this role: its commits do not wait for the standby',
          );
        } finally {
          await sql(rs.primary.url, 'ALTER ROLE postgres RESET synchronous_commit');
        }
      });
    });
  },
);
