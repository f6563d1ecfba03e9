// Retention through the real CLI on both stores: `leasejob prune` deletes old events and final
// windows, keeps what must stay, records the horizon that keeps a pruned occurrence from running
// again, explains the gap in `history`, refuses bad input, and does not hold up a concurrent run.
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { logLines, runCli, scrapeOnce, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';

const tmp = tempDir('leasejob-prune-');
const DAY = 86_400_000;

/** What a test needs of a store besides the CLI: SQL to age and seed its history, and to read it. */
interface Target {
  kind: 'postgresql' | 'sqlite';
  conn(): string[];
  env: Record<string, string | undefined>;
  /** Rows of a statement (PostgreSQL placeholders $1..; the SQLite target rewrites them to ?). */
  rows<T = Record<string, unknown>>(sql: string, values?: unknown[]): Promise<T[]>;
  /** Move every recorded instant of `job` `days` into the past, as if its runs were that old. */
  age(job: string, days: number): Promise<void>;
  /** `n` events of `job` `days` old, after its current sequence, as a long history would have. */
  seedEvents(job: string, n: number, days: number): Promise<void>;
  close(): Promise<void>;
}

async function pgTarget(): Promise<Target> {
  const db: TestDb = await testDb();
  const s = `"${db.schema}"`;
  return {
    kind: 'postgresql',
    conn: () => ['--database-url', db.url, '--schema', db.schema],
    env: {},
    rows: (sql, values) => db.rows(sql.replaceAll('leasejob.', `${s}.`), values),
    age: async (job, days) => {
      const i = `${days} days`;
      await db.rows(
        `UPDATE ${s}.events SET db_time = db_time - $2::interval, host_time = host_time - $2::interval WHERE job = $1`,
        [job, i],
      );
      await db.rows(
        `UPDATE ${s}.leases SET acquired_at = acquired_at - $2::interval, renewed_at = renewed_at - $2::interval WHERE name = $1`,
        [job, i],
      );
    },
    seedEvents: async (job, n, days) => {
      await db.rows(
        `WITH j AS (UPDATE ${s}.jobs SET last_seq = last_seq + $2 WHERE name = $1 RETURNING last_seq)
         INSERT INTO ${s}.events (job, seq, kind, db_time, detail)
         SELECT $1, j.last_seq - $2 + g, 'seeded', now() - $3::interval, '{}' FROM j, generate_series(1, $2::int) g`,
        [job, n, `${days} days`],
      );
    },
    close: () => db.close(),
  };
}

async function sqliteTarget(): Promise<Target> {
  const dir = path.join(tmp, `sqlite-${Math.random().toString(16).slice(2)}`);
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'leasejob.db');
  let db: Database.Database | undefined;
  const open = (): Database.Database => (db ??= new Database(file, { timeout: 5_000 }));
  const run = (sql: string, values: unknown[] = []): Array<Record<string, unknown>> => {
    const stmt = open().prepare(sql.replaceAll('leasejob.', '').replace(/\$\d+/g, '?'));
    return stmt.reader ? (stmt.all(...values) as Array<Record<string, unknown>>) : (stmt.run(...values), []);
  };
  return {
    kind: 'sqlite',
    conn: () => ['--state-file', file],
    env: {
      DATABASE_URL: undefined,
      LEASEJOB_DATABASE_URL: undefined,
      PGHOST: undefined,
      PGPORT: undefined,
      PGDATABASE: undefined,
      PGUSER: undefined,
      PGPASSWORD: undefined,
      KUBERNETES_SERVICE_HOST: undefined,
    },
    rows: async <T>(sql: string, values?: unknown[]) => run(sql, values) as T[],
    age: async (job, days) => {
      run('UPDATE events SET db_time = db_time - ?, host_time = host_time - ? WHERE job = ?', [
        days * DAY,
        days * DAY,
        job,
      ]);
      run('UPDATE leases SET acquired_at = acquired_at - ?, renewed_at = renewed_at - ? WHERE name = ?', [
        days * DAY,
        days * DAY,
        job,
      ]);
    },
    seedEvents: async (job, n, days) => {
      const d = open();
      d.transaction(() => {
        const last = d.prepare('SELECT last_seq FROM jobs WHERE name = ?').pluck().get(job) as number;
        d.prepare('UPDATE jobs SET last_seq = ? WHERE name = ?').run(last + n, job);
        const ins = d.prepare("INSERT INTO events (job, seq, kind, db_time, detail) VALUES (?, ?, 'seeded', ?, '{}')");
        const at = Date.now() - days * DAY;
        for (let k = 1; k <= n; k++) ins.run(job, last + k, at);
      }).immediate();
    },
    close: async () => {
      db?.close();
    },
  };
}

/** The test file's start: every occurrence is named from it, so a test crossing a minute still names the same ones. */
const NOW = Date.now();
const iso = (daysAgo: number, minute = 0): string =>
  new Date(Math.floor((NOW - daysAgo * DAY) / 60_000) * 60_000 + minute * 60_000).toISOString();
const marker = (name: string): string => path.join(tmp, `${name}-${Math.random().toString(16).slice(2)}.ran`);

describe.each([
  ['postgresql', pgTarget],
  ['sqlite', sqliteTarget],
] as const)('prune on %s', (_kind, make) => {
  let t: Target;
  beforeAll(async () => {
    t = await make();
  });
  afterAll(async () => {
    await t.close();
  });

  const cli = (args: string[], opts: { timeoutMs?: number } = {}) =>
    runCli([args[0]!, ...t.conn(), ...args.slice(1)], t.env, opts);
  const run = (job: string, scheduled: string, extra: string[] = [], child: string[] = ['true']) =>
    cli([
      'run',
      '--name',
      job,
      '--schedule',
      '* * * * *',
      '--window-from-schedule',
      '--scheduled-time',
      scheduled,
      ...extra,
      '--',
      ...child,
    ]);
  const windows = async (job: string) =>
    (
      await t.rows<{ window_key: string; outcome: string }>(
        'SELECT window_key, outcome FROM leasejob.windows WHERE job = $1 ORDER BY window_key',
        [job],
      )
    ).map((w) => `${w.window_key} ${w.outcome}`);
  const eventSeqs = async (job: string) =>
    (await t.rows<{ seq: number | string }>('SELECT seq FROM leasejob.events WHERE job = $1 ORDER BY seq', [job])).map(
      (r) => Number(r.seq),
    );
  const counts = async () =>
    (
      await t.rows<{ job: string; kind: string; n: number | string }>(
        "SELECT job, kind, n FROM leasejob.event_counts WHERE kind <> 'pruned' ORDER BY job, kind, host",
      )
    ).map((c) => `${c.job} ${c.kind} ${Number(c.n)}`);
  const tableCounts = async () => {
    const one = async (table: string) =>
      Number((await t.rows<{ n: number | string }>(`SELECT count(*) AS n FROM leasejob.${table}`))[0]!.n);
    return {
      events: await one('events'),
      windows: await one('windows'),
      retention: await one('retention'),
      leases: await one('leases'),
      jobs: await one('jobs'),
    };
  };

  it('deletes old events and final windows, keeps the rest, and says so in history', async () => {
    // `hist`: four old runs (three completed, one failed: open), one missed by --max-delay, then
    // aged 200 days; then one recent run. `dormant`: two old completed runs and nothing since.
    for (const day of [200, 199, 198]) expect((await run('hist', iso(day))).exitCode).toBe(0);
    expect((await run('hist', iso(197), [], ['sh', '-c', 'exit 3'])).exitCode).toBe(3);
    expect((await run('hist', iso(196), ['--max-delay', '1h'])).exitCode).toBe(0);
    for (const day of [150, 149]) expect((await run('dormant', iso(day))).exitCode).toBe(0);
    await t.age('hist', 200);
    await t.age('dormant', 150);
    expect((await run('hist', iso(0, -1), ['--max-delay', '1h'])).exitCode).toBe(0);
    const histEvents = await eventSeqs('hist');
    const dormantEvents = await eventSeqs('dormant');
    const before = await tableCounts();
    const countsBefore = await counts();
    const leasesBefore = await t.rows('SELECT name, generation FROM leasejob.leases ORDER BY name');

    // Dry run: the counts, nothing written.
    const dry = await cli(['prune', '--older-than', '30d', '--dry-run']);
    expect(dry.exitCode, dry.all).toBe(0);
    expect(dry.stdout).toMatch(/^events: {2}(\d+) would delete \(dry run, nothing written\)$/m);
    const dryEvents = Number(/^events: {2}(\d+)/m.exec(dry.stdout)![1]);
    const dryWindows = Number(/^windows: (\d+)/m.exec(dry.stdout)![1]);
    // hist: 3 old completed + the missed one; dormant: the older of its two.
    expect(dryWindows).toBe(5);
    expect(await tableCounts()).toEqual(before);

    const r = await cli(['prune', '--older-than', '30d']);
    expect(r.exitCode, r.all).toBe(0);
    expect(r.stdout).toMatch(/^horizon: \S+ \(--older-than 30d\); 2 of 2 job\(s\) had rows older$/m);
    expect(r.stdout).toMatch(new RegExp(`^events:  ${dryEvents} deleted$`, 'm'));
    expect(r.stdout).toMatch(new RegExp(`^windows: ${dryWindows} deleted$`, 'm'));
    expect(r.stdout).toMatch(/^\d+ rows in [\d.]+s, \d+ rows\/s, \d+ batches$/m);
    const done = logLines(r.stderr).find((l) => l.msg === 'prune finished');
    expect(done).toMatchObject({ jobs: 2, jobsPruned: 2, events: dryEvents, windows: dryWindows });

    // Kept: the open (failed) window, the recent completed one, dormant's latest completed one.
    expect(await windows('hist')).toEqual([
      `${iso(197).replace('.000Z', 'Z')} failed`,
      `${iso(0, -1).replace('.000Z', 'Z')} completed`,
    ]);
    expect(await windows('dormant')).toEqual([`${iso(149).replace('.000Z', 'Z')} completed`]);
    // Leases, registry and the scrape counters untouched; generations go on.
    expect(await t.rows('SELECT name, generation FROM leasejob.leases ORDER BY name')).toEqual(leasesBefore);
    expect((await tableCounts()).jobs).toBe(before.jobs);
    expect(await counts()).toEqual(countsBefore);
    // hist: every aged event went, the recent run's stayed (a prefix of the sequence).
    const histLeft = await eventSeqs('hist');
    const histPruned = histLeft[0]! - 1;
    expect(histPruned).toBeGreaterThan(0);
    // The recent run's four events stayed, then the prune's own record.
    expect(histLeft.slice(0, -1)).toEqual(histEvents.slice(-4));
    // dormant: its lease's current generation (the last run: acquired, claimed, completed,
    // released) keeps its events; the first run's went.
    const dormantLeft = await eventSeqs('dormant');
    expect(dormantLeft.slice(0, -1)).toEqual(dormantEvents.slice(-4));
    expect(dryEvents).toBe(histPruned + dormantEvents.length - 4);

    // history: the gap is said, in the table and in the log itself.
    const h = await cli(['history', '--name', 'hist', '--limit', '1000']);
    expect(h.exitCode, h.all).toBe(0);
    expect(h.stdout.split('\n')[0]).toMatch(
      new RegExp(`^events 1-${histPruned} pruned \\(leasejob prune, horizon \\S+\\); kept from seq ${histPruned + 1}$`),
    );
    const json = JSON.parse((await cli(['history', '--name', 'hist', '--json', '--limit', '1000'])).stdout) as Array<{
      seq: string;
      kind: string;
      detail: Record<string, unknown>;
    }>;
    expect(Number(json[0]!.seq)).toBe(histPruned + 1);
    expect(json.at(-1)).toMatchObject({
      kind: 'pruned',
      detail: { events: histPruned, windows: 4, pruned_through_seq: histPruned },
    });

    // Sequence numbers are never reused: the next event follows the last one ever written.
    const next = await run('hist', iso(0, -2), ['--max-delay', '1h']);
    expect(next.exitCode, next.all).toBe(0);
    const after = await eventSeqs('hist');
    expect(after.at(-1)).toBeGreaterThan(Number(json.at(-1)!.seq));

    // A late duplicate of a pruned occurrence is missed, and its child does not run.
    const ran = marker('late');
    const late = await run('hist', iso(200), [], ['sh', '-c', `touch ${ran}`]);
    expect(late.exitCode, late.all).toBe(0);
    expect(logLines(late.stderr).find((l) => l.msg === 'window missed')).toBeDefined();
    expect(existsSync(ran)).toBe(false);
    expect(await windows('hist')).toContain(`${iso(200).replace('.000Z', 'Z')} missed`);
    const missed = (
      await t.rows<{ detail: unknown }>(
        "SELECT detail FROM leasejob.events WHERE job = $1 AND kind = 'window-missed' ORDER BY seq DESC LIMIT 1",
        ['hist'],
      )
    )[0]!;
    const detail = typeof missed.detail === 'string' ? JSON.parse(missed.detail) : missed.detail;
    expect(detail).toHaveProperty('retained_from');
    // --rerun asks to run it whatever the ledger says.
    const rerun = await run('hist', iso(200), ['--rerun'], ['sh', '-c', `touch ${ran}`]);
    expect(rerun.exitCode, rerun.all).toBe(0);
    expect(existsSync(ran)).toBe(true);

    // Again: nothing old is left but what is kept; the horizon never moves back.
    const horizon = (
      await t.rows<{ retained_from: unknown }>('SELECT retained_from FROM leasejob.retention WHERE job = $1', ['hist'])
    )[0]!.retained_from;
    const again = await cli(['prune', '--older-than', '60d']);
    expect(again.exitCode, again.all).toBe(0);
    expect(
      (
        await t.rows<{ retained_from: unknown }>('SELECT retained_from FROM leasejob.retention WHERE job = $1', [
          'hist',
        ])
      )[0]!.retained_from,
    ).toEqual(horizon);
  });

  it('refuses bad input with exit 64 and writes nothing', async () => {
    expect((await run('strict', iso(0, -1), ['--max-delay', '2d'])).exitCode).toBe(0);
    await t.age('strict', 100);
    const before = await tableCounts();
    const cases: Array<[string[], RegExp]> = [
      [['prune', '--older-than', '0'], /Expected `--older-than` to be a duration like 90s/],
      [['prune'], /Expected `--older-than` \(e\.g\. 90d\)/],
      [['prune', '--older-than', 'soon'], /Expected `--older-than` to be a duration/],
      [
        ['prune', '--older-than', '1d'],
        /at least the longest --max-delay of the jobs it prunes \(job "strict": 2d\), got `1d`/,
      ],
      [['prune', '--older-than', '1d', '--name', 'strict'], /job "strict": 2d/],
      [['prune', '--older-than', '30d', '--name', 'no-such-job'], /no job named "no-such-job"/],
      [
        ['prune', '--older-than', '30d', '--batch-size', '0'],
        /Expected `--batch-size` to be a whole number from 1 to 100000/,
      ],
      [['prune', '--older-than', '30d', '--vacuum', '--dry-run'], /either `--vacuum` or `--dry-run`/],
    ];
    for (const [args, message] of cases) {
      const r = await cli(args);
      expect(r.exitCode, `${args.join(' ')}: ${r.all}`).toBe(64);
      expect(r.stderr.trim().split('\n').at(-1)).toMatch(message);
    }
    if (t.kind === 'postgresql') {
      const v = await cli(['prune', '--older-than', '30d', '--vacuum']);
      expect(v.exitCode, v.all).toBe(64);
      expect(v.stderr).toMatch(/`--vacuum` is for the embedded store/);
    }
    expect(await tableCounts()).toEqual(before);
  });

  it('a concurrent run is not held up: it completes while prune works through a long history in small batches', async () => {
    // A run, a long history, a run: the lease's current generation (the second run) keeps
    // its events, everything before it is old.
    expect((await run('busy', iso(0, -30))).exitCode).toBe(0);
    const seeded = 20_000;
    await t.seedEvents('busy', seeded, 0);
    expect((await run('busy', iso(0, -29))).exitCode).toBe(0);
    await t.age('busy', 120);
    const p = startCli(
      ['prune', '--older-than', '30d', '--name', 'busy', '--batch-size', '10', ...t.conn()],
      { ...t.env, LEASEJOB_LOG_LEVEL: 'info' },
      { timeoutMs: 300_000 },
    );
    // Runs while prune deletes: each must complete, its window and events kept.
    await waitFor(
      'prune to delete its first batch',
      async () => (await eventSeqs('busy'))[0]! > 1 || undefined,
      120_000,
    );
    const ran: string[] = [];
    for (let k = 0; k < 3; k++) {
      const m = marker(`busy${k}`);
      const r = await run('busy', iso(0, -2 - k), [], ['sh', '-c', `touch ${m}`]);
      expect(r.exitCode, r.all).toBe(0);
      expect(existsSync(m)).toBe(true);
      ran.push(iso(0, -2 - k).replace('.000Z', 'Z'));
    }
    const pr = await p;
    expect(pr.exitCode, pr.all).toBe(0);
    const done = logLines(pr.stderr).find((l) => l.msg === 'prune finished')!;
    // Every seeded event went, 10 per transaction at most.
    expect(Number(done.events)).toBeGreaterThanOrEqual(seeded);
    expect(Number(done.batches)).toBeGreaterThanOrEqual(seeded / 10);
    expect(
      Number(
        (
          await t.rows<{ n: number | string }>(
            "SELECT count(*) AS n FROM leasejob.events WHERE job = $1 AND kind = 'seeded'",
            ['busy'],
          )
        )[0]!.n,
      ),
    ).toBe(0);
    // The runs' windows are completed and kept.
    const left = await windows('busy');
    for (const w of ran) expect(left).toContain(`${w} completed`);
  });
  it('forgets hosts not seen since the horizon: clock readings go, per-host counts move to "(pruned)", totals keep', async () => {
    const on = (node: string, minute: number) =>
      runCli(
        ['run', ...t.conn(), '--name', 'hosts', '--schedule', '* * * * *', '--window-from-schedule',
          '--scheduled-time', iso(0, minute), '--', 'true'],
        { ...t.env, LEASEJOB_NODE_NAME: node },
      ); // prettier-ignore
    for (const [node, minute] of [
      ['node-old', -30],
      ['node-new', -31],
    ] as const) {
      const r = await on(node, minute);
      expect(r.exitCode, r.all).toBe(0);
    }
    const hosts = async () => (await t.rows<{ host: string }>('SELECT host FROM leasejob.hosts')).map((h) => h.host);
    const countHosts = async () =>
      (await t.rows<{ host: string }>("SELECT DISTINCT host FROM leasejob.event_counts WHERE job = 'hosts'"))
        .map((h) => h.host)
        .sort();
    const totals = async () =>
      (await t.rows<{ kind: string; n: number | string }>(
        "SELECT kind, sum(n) AS n FROM leasejob.event_counts WHERE job = 'hosts' GROUP BY kind ORDER BY kind",
      )).map((c) => `${c.kind} ${Number(c.n)}`); // prettier-ignore
    expect(await hosts()).toEqual(expect.arrayContaining(['node-old', 'node-new']));
    expect(await countHosts()).toEqual(['node-new', 'node-old']);
    // node-old was last seen 100 days ago.
    const [hostsSql, countsSql] =
      t.kind === 'postgresql'
        ? ["UPDATE leasejob.hosts SET measured_at = now() - interval '100 days' WHERE host = $1",
            "UPDATE leasejob.event_counts SET last_at = now() - interval '100 days' WHERE host = $1"]
        : [`UPDATE leasejob.hosts SET measured_at = measured_at - ${100 * DAY} WHERE host = $1`,
            `UPDATE leasejob.event_counts SET last_at = last_at - ${100 * DAY} WHERE host = $1`]; // prettier-ignore
    await t.rows(hostsSql, ['node-old']);
    await t.rows(countsSql, ['node-old']);
    const before = await totals();
    const dry = await cli(['prune', '--older-than', '90d', '--dry-run']);
    expect(dry.exitCode, dry.all).toBe(0);
    expect(dry.stdout).toMatch(/^hosts: {3}1 not seen since the horizon would be forgotten/m);
    expect(await hosts()).toContain('node-old');
    const r = await cli(['prune', '--older-than', '90d']);
    expect(r.exitCode, r.all).toBe(0);
    expect(r.stdout).toMatch(/^hosts: {3}1 not seen since the horizon forgotten/m);
    expect(await hosts()).not.toContain('node-old');
    expect(await hosts()).toContain('node-new');
    expect(await countHosts()).toEqual(['(pruned)', 'node-new']);
    expect(await totals()).toEqual(before);
    const metrics = await scrapeOnce(t.conn(), t.env);
    expect(metrics).toContain('host="node-new"');
    expect(metrics).not.toContain('host="node-old"');
  });
});
