#!/usr/bin/env node
// Opt-in, not in `npm test`: leasejob under a real HA manager. A single-node etcd, two Patroni
// nodes (Debian patroni, postgresql-15), and one address that follows the leader as HAProxy
// does (a TCP proxy retargeted to whichever node answers 200 on Patroni's REST /primary). A
// runner holds a lease with a fenced child while `patronictl failover` moves the primary; then
// the script checks: nothing the child committed is lost, the lease ends at the failover (no
// lease outlives one), the next run completes the window with a token of a later epoch, a
// token the new primary's history never issued is refused, and `leasejob check` reports the setup.
//
//   npm run build && node test/ha/patroni-failover.mjs [--synchronous]
//
// --synchronous: Patroni's synchronous_mode on. Exit 0 when every check held, 1 otherwise,
// 2 when a tool is missing (said why). Runs as root by starting Patroni as `postgres`.
import { execFile, spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startEtcd } from '../bench/lib/etcd.mjs';
import { freePort } from '../helpers/embedded-pg.mjs';
import { startProxy } from '../helpers/proxy.mjs';
import { PG_BIN, replicationMissing } from '../helpers/replication.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const BIN = path.join(ROOT, 'bin', 'leasejob.js');
const WRITER = path.join(ROOT, 'test', 'fixtures', 'fenced-writer.mjs');
const { values: args } = parseArgs({ options: { synchronous: { type: 'boolean', default: false } } });
const say = (m) => process.stdout.write(`[patroni ${new Date().toISOString().slice(11, 19)}] ${m}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const missing =
  replicationMissing() ??
  (['patroni', 'patronictl'].find((t) => spawnSync('which', [t]).status !== 0) &&
    'patroni/patronictl not found (Debian package patroni)');
if (missing) {
  say(`skipped: ${missing}`);
  process.exit(2);
}

const failures = [];
const expectThat = (ok, what) => {
  say(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures.push(what);
};

const stops = [];
const user =
  process.getuid?.() === 0
    ? {
        uid: Number(spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).stdout),
        gid: Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout),
      }
    : {};

function cli(argv, opts = {}) {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...argv], { timeout: opts.timeoutMs ?? 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }),
    );
  });
}
async function query(url, text, values = []) {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => {});
  await c.connect();
  try {
    return (await c.query(text, values)).rows;
  } finally {
    await c.end().catch(() => {});
  }
}
async function waitFor(what, fn, limitMs = 90_000) {
  const until = Date.now() + limitMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

try {
  const etcd = await startEtcd(say);
  if (etcd.note) {
    say(`skipped: ${etcd.note}`);
    process.exit(2);
  }
  stops.push(() => etcd.stop());
  const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-patroni-'));
  chmodSync(dir, 0o755);
  if (user.uid !== undefined) chownSync(dir, user.uid, user.gid);
  stops.push(async () => rmSync(dir, { recursive: true, force: true }));

  const nodes = [];
  for (const name of ['node1', 'node2']) nodes.push({ name, pgPort: await freePort(), apiPort: await freePort() });
  for (const n of nodes) {
    n.config = path.join(dir, `${n.name}.yml`);
    writeFileSync(
      n.config,
      `scope: leasejob-ha
name: ${n.name}
restapi:
  listen: 127.0.0.1:${n.apiPort}
  connect_address: 127.0.0.1:${n.apiPort}
etcd3:
  hosts: ${etcd.endpoint.replace('http://', '')}
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 2
    retry_timeout: 5
    synchronous_mode: ${args.synchronous}
    postgresql:
      use_pg_rewind: false
      parameters:
        wal_level: replica
        max_wal_senders: 5
        hot_standby: 'on'
        fsync: 'off'
  initdb:
    - encoding: UTF8
    - locale: C
  pg_hba:
    - host replication all 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:${n.pgPort}
  connect_address: 127.0.0.1:${n.pgPort}
  data_dir: ${path.join(dir, n.name)}
  bin_dir: ${PG_BIN}
  authentication:
    superuser: { username: postgres }
    replication: { username: postgres }
  parameters:
    unix_socket_directories: '${dir}'
`,
    );
    if (user.uid !== undefined) chownSync(n.config, user.uid, user.gid);
    n.proc = spawn('patroni', [n.config], {
      ...user,
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { PATH: process.env.PATH, LC_ALL: 'C.UTF-8' },
    });
    n.log = '';
    const keep = (d) => (n.log = (n.log + d).slice(-8000));
    n.proc.stdout.on('data', keep);
    n.proc.stderr.on('data', keep);
    stops.unshift(async () => {
      if (n.proc.exitCode === null) {
        n.proc.kill('SIGTERM');
        await new Promise((r) => setTimeout(r, 5_000).unref() && n.proc.once('exit', r));
        if (n.proc.exitCode === null) n.proc.kill('SIGKILL');
      }
    });
    // The first node bootstraps the cluster before the second joins it.
    if (n === nodes[0])
      await waitFor('node1 to lead', async () => (await fetch(`http://127.0.0.1:${n.apiPort}/primary`)).status === 200);
  }
  const leader = async () => {
    for (const n of nodes)
      if ((await fetch(`http://127.0.0.1:${n.apiPort}/primary`).catch(() => undefined))?.status === 200) return n;
    return undefined;
  };
  await waitFor(
    'node2 to stream',
    async () => (await fetch(`http://127.0.0.1:${nodes[1].apiPort}/replica`)).status === 200,
  );
  await waitFor(
    'node1 to have a streaming standby',
    async () =>
      (
        await query(
          `postgres://postgres@127.0.0.1:${nodes[0].pgPort}/postgres`,
          "SELECT count(*)::int AS n FROM pg_stat_replication WHERE state = 'streaming'",
        )
      )[0].n > 0,
  );
  say(
    `Patroni cluster up (synchronous_mode ${args.synchronous}): ${nodes.map((n) => `${n.name} pg ${n.pgPort}`).join(', ')}`,
  );

  // The address that follows the leader, as HAProxy with `option httpchk GET /primary`.
  const pgUrl = (n) => `postgres://postgres@127.0.0.1:${n.pgPort}/postgres`;
  let current = await leader();
  const front = await startProxy(pgUrl(current));
  stops.unshift(() => front.close());
  const url = front.url(pgUrl(current));
  let watching = true;
  const watcher = (async () => {
    while (watching) {
      const l = await leader().catch(() => undefined);
      if (l && l !== current) {
        current = l;
        front.retarget(pgUrl(l));
        say(`address moved to ${l.name}`);
      }
      await sleep(200);
    }
  })();
  stops.unshift(async () => {
    watching = false;
    await watcher;
  });

  const m = await cli(['migrate', '--database-url', url]);
  expectThat(m.code === 0, `migrate through the moving address (${m.stderr.trim().split('\n').at(-1) ?? ''})`);
  await query(
    url,
    `CREATE TABLE leasejob.fenced_units (window_key text NOT NULL, unit integer NOT NULL, generation bigint NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp(), UNIQUE (window_key, unit))`,
  );
  // Patroni names the synchronous standby a loop or two after it joined.
  const want = args.synchronous ? 'synchronous' : 'asynchronous';
  let before;
  await waitFor(
    `check to see the cluster ${want}`,
    async () => {
      before = await cli(['check', '--database-url', url, '--json']);
      return JSON.parse(before.stdout).replication.mode === want;
    },
    30_000,
  ).catch(() => {});
  const repBefore = JSON.parse(before.stdout).replication;
  expectThat(
    repBefore.mode === (args.synchronous ? 'synchronous' : 'asynchronous'),
    `check before: ${repBefore.mode} (exit ${before.code})`,
  );

  // A holds the lease with a fenced child writing slowly through the failover.
  const logA = path.join(dir, 'a.jsonl');
  const a = spawn(
    process.execPath,
    [
      BIN,
      'run',
      '--name',
      'ha',
      '--window',
      'w1',
      '--ttl',
      '30s',
      '--database-url',
      url,
      '--pass-database-url',
      '--',
      process.execPath,
      WRITER,
      '--reconnect',
      '--units',
      '40',
      '--delay-ms',
      '500',
      '--log',
      logA,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let aErr = '';
  a.stderr.on('data', (d) => (aErr += d));
  const aExit = new Promise((r) => a.once('exit', (code) => r(code)));
  const events = () =>
    existsSync(logA)
      ? readFileSync(logA, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l))
      : [];
  await waitFor('A to write', async () => events().some((e) => e.event === 'written'));
  const tokenA = events()[0].generation;
  say(`A holds the lease, token ${tokenA}; patronictl failover to node2`);

  // A healthy asynchronous cluster: the replica has replayed what came before (the table).
  const [{ lsn }] = await query(pgUrl(current), 'SELECT pg_current_wal_lsn()::text AS lsn');
  const other = current === nodes[0] ? nodes[1] : nodes[0];
  await waitFor(
    'the replica to replay',
    async () => (await query(pgUrl(other), 'SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS ok', [lsn]))[0].ok,
  );
  const fo = spawnSync(
    'patronictl',
    ['-c', nodes[0].config, 'failover', '--candidate', current === nodes[0] ? 'node2' : 'node1', '--force'],
    { ...user, encoding: 'utf8', timeout: 120_000 },
  );
  expectThat(fo.status === 0, `patronictl failover (${(fo.stdout + fo.stderr).trim().split('\n').at(-1)})`);
  await waitFor('the address to move', async () => current !== nodes[0]);

  // The lease of the earlier history ends at the failover (leasejob cannot tell from the new
  // primary that nothing was lost): A's child is refused or stopped, A exits 75.
  const codeA = await aExit;
  expectThat(codeA === 75, `A's lease ended at the failover (exit ${codeA})`);
  const writtenA = [
    ...new Set(
      events()
        .filter((e) => e.event === 'written')
        .map((e) => e.unit),
    ),
  ];
  const kept = await query(
    url,
    "SELECT unit FROM leasejob.fenced_units WHERE window_key = 'w1' AND generation = $1 ORDER BY unit",
    [tokenA],
  );
  expectThat(
    JSON.stringify(kept.map((r) => r.unit)) === JSON.stringify(writtenA),
    `every unit A was told was committed (${writtenA.length}) is on the new primary: the failover lost nothing`,
  );
  // The next run redoes the window in the next epoch, writing only what is missing.
  const logC = path.join(dir, 'c.jsonl');
  const c = await cli(
    [
      'run',
      '--name',
      'ha',
      '--window',
      'w1',
      '--on-busy',
      'wait',
      '--wait-timeout',
      '60s',
      '--database-url',
      url,
      '--pass-database-url',
      '--',
      process.execPath,
      WRITER,
      '--units',
      '40',
      '--delay-ms',
      '0',
      '--log',
      logC,
    ],
    { timeoutMs: 120_000 },
  );
  const tokenC = existsSync(logC) ? JSON.parse(readFileSync(logC, 'utf8').split('\n')[0]).generation : '0';
  expectThat(
    c.code === 0 && BigInt(tokenC) > BigInt(tokenA) && BigInt(tokenC) / 1_000_000_000_000n >= 1n,
    `the next run completed the window with a token (${tokenC}) in a later epoch than A's (${tokenA})`,
  );
  const rows = await query(url, "SELECT count(*)::int AS n FROM leasejob.fenced_units WHERE window_key = 'w1'");
  expectThat(rows[0].n === 40, 'the window has every unit once');
  const refused = await query(url, 'SELECT leasejob.assert_lease($1, $2)', ['ha', String(BigInt(tokenC) + 1n)]).then(
    () => undefined,
    (e) => e,
  );
  expectThat(refused?.code === 'LJ001', 'a token this history never issued is refused');
  const after = await cli(['check', '--database-url', url, '--json']);
  const repAfter = JSON.parse(after.stdout).replication;
  expectThat(
    repAfter.fenceEpoch >= 1 && repAfter.mode !== 'standby',
    `check after: ${repAfter.mode}, fence epoch ${repAfter.fenceEpoch}, timeline ${repAfter.timeline}`,
  );
  if (failures.length && process.env.PATRONI_LOGS) for (const n of nodes) say(`--- ${n.name}\n${n.log}`);
  if (aErr && failures.length) say(`A's log: ${aErr.split('\n').slice(-5).join(' | ')}`);
} catch (err) {
  failures.push(String(err.message));
  say(`FAIL ${err.message}`);
} finally {
  for (const s of stops) await s().catch(() => {});
}
say(failures.length ? `${failures.length} check(s) failed` : 'every check held');
process.exit(failures.length ? 1 : 0);
