// A lease judged on two clocks (issue 44, docs/fencing.md "Which clock decides what"), on a real
// PostgreSQL server whose wall clock steps: the server runs under libfaketime (Debian's
// `faketime`, the server process only; every runner's clock stays true), its offset read from a
// file on every call, so rewriting the file steps the database's clock as NTP stepping its host
// would. The children hold an exclusive flock for as long as they run: a second child started
// while the first still runs finds the lock taken and writes `overlap`.
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { faketimeEnv, faketimeLibrary } from '../helpers/faketime.mjs';
import { replicationMissing, startLocalServer } from '../helpers/replication.mjs';
import { readPidFile, signalPid } from '../helpers/signal.mjs';

const FAKETIME = faketimeLibrary();
const missing =
  replicationMissing() ??
  (FAKETIME ? undefined : 'libfaketime not found: install Debian faketime (apt-get install faketime)');
if (missing) console.info(`two-clock tests skipped: ${missing}`);

const UNCONFIRMED = /the database clock may have stepped/;
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

// One server for the file: its clock file readable by the server's user (postgres, as root).
const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-two-clocks-'));
chmodSync(dir, 0o755);
const clockFile = path.join(dir, 'db-clock');
const setDbClock = (offset: string): void => {
  writeFileSync(clockFile, `${offset}\n`);
  chmodSync(clockFile, 0o644);
};
let server: Awaited<ReturnType<typeof startLocalServer>> | undefined;
afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function db(): Promise<string> {
  if (!server) {
    setDbClock('+0s');
    server = await startLocalServer({ env: faketimeEnv(FAKETIME!, clockFile) });
    const m = await runCli(['migrate', '--database-url', server.url]);
    expect(m.exitCode, m.all).toBe(0);
  }
  return server.url;
}

/** Whether the lease's holder has renewed it (its offset measured then is recorded with the next). */
async function renewed(url: string, job: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query('SELECT renewed_at > acquired_at AS renewed FROM leasejob.leases WHERE name = $1', [job]);
    return r.rows[0]?.renewed === true;
  } finally {
    await c.end();
  }
}

/**
 * A child that holds `lock` while it runs (`seconds`), saying `started` in `log`; `overlap` when
 * another child holds it (flock -n: exit 99).
 */
function lockedChild(lock: string, log: string, seconds: number, pidFile?: string): string[] {
  const body = `${pidFile ? `echo $$ > ${pidFile}.tmp && mv ${pidFile}.tmp ${pidFile}; ` : ''}echo started >> ${log}; exec sleep ${seconds}`;
  return ['sh', '-c', `flock -n -E 99 ${lock} sh -c '${body}'; [ $? -eq 99 ] && echo overlap >> ${log}; true`];
}

function run(url: string, job: string, child: string[], extra: string[] = []) {
  return startCli(
    ['run', '--database-url', url, '--name', job, '--ttl', '10s', '--kill-grace', '1s', ...extra, '--', ...child],
    {},
    { timeoutMs: 120_000 },
  );
}

const files = (job: string) => ({ lock: path.join(dir, `${job}.lock`), log: path.join(dir, `${job}.log`) });
const lines = (log: string): string[] => (existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n') : []);

describe.skipIf(missing !== undefined)('a lease judged on two clocks (a PostgreSQL server whose clock steps)', () => {
  it('a database clock stepped past the lease gives it to no one while its holder runs', async () => {
    const url = await db();
    const { lock, log } = files('step');
    const a = run(url, 'step', lockedChild(lock, log, 120));
    cleanups.push(() => void a.kill('SIGKILL'));
    await waitFor('the first child', () => lines(log).includes('started'), 60_000);
    // Renewed: the holder has measured its offset (recorded with its next renewal).
    await waitFor('a renewal', () => renewed(url, 'step'), 60_000);
    // The database clock steps forward past the lease (TTL 10 s): expired, on that clock alone.
    setDbClock('+25s');
    cleanups.push(() => setDbClock('+0s'));
    const b = await run(url, 'step', lockedChild(lock, log, 0));
    const first = await a;
    setDbClock('+0s');
    expect(lines(log), `${first.all}\n----\n${b.all}`).not.toContain('overlap');
    expect(b.exitCode, b.all).toBe(0);
    expect(lines(log).filter((l) => l === 'started')).toHaveLength(2);
    // The contender said why it waited; the holder, why it stopped.
    const waited = logLines(b.stderr).find((l) => UNCONFIRMED.test(String(l.msg)));
    expect(waited, b.all).toBeDefined();
    expect(waited!.disagreementMs as number).toBeGreaterThan(10_000);
    expect(first.exitCode, first.all).toBe(75);
    expect(first.all).toMatch(/the database clock stepped forward by about \d+ s/);
  });

  it('after an ordinary crash the clocks agree: taken over at expiry, with no wait of its own', async () => {
    const url = await db();
    for (const [job, late] of [
      ['crash-early', false],
      ['crash-late', true],
    ] as const) {
      const { lock, log } = files(job);
      const pidFile = path.join(dir, `${job}.pid`);
      const a = run(url, job, lockedChild(lock, log, 120, pidFile));
      cleanups.push(() => void a.kill('SIGKILL'));
      await waitFor('the first child', () => readPidFile(pidFile), 60_000);
      // Killed before its first renewal (its offset is the acquisition's estimate), or after one.
      if (late) await waitFor('a renewal', () => renewed(url, job), 60_000);
      signalPid(a.pid!, 'SIGKILL');
      await a;
      const b = await run(url, job, lockedChild(lock, log, 0));
      expect(b.exitCode, b.all).toBe(0);
      expect(lines(log), b.all).not.toContain('overlap');
      const msgs = logLines(b.stderr).map((l) => String(l.msg));
      // Its session is gone (a crash): waited out until the database's expiry, then taken.
      expect(
        msgs.some(
          (m) =>
            m === 'lease holder gone, waiting for its lease to expire' ||
            m === 'lease held by a stale owner, waiting for expiry',
        ),
        b.all,
      ).toBe(true);
      expect(
        msgs.some((m) => UNCONFIRMED.test(m)),
        b.all,
      ).toBe(false);
    }
  });
});
