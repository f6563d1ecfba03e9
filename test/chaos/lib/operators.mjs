// Operator actors beside the runs: the day-2 commands at seeded random times on two jobs of their
// own, through the real CLI, while the round's faults hit the same database. `prune` with short
// horizons; `pause`/`resume` and `mark --done|--skip` with --expect-version; `backfill` over
// ranges that overlap pruned and live windows; `run` of late ticks and `run --catch-up` with a
// coarse --window-format. Their connections ask for synchronous_commit = off, so the round's
// immediate restarts are crash restarts that lose their unflushed WAL (leasejob must commit
// what it acknowledges durably anyway). Triggers keep a copy of every event and every pruned
// window (prune deletes both), which the checks below read.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { BIN } from './cluster.mjs';

const MINUTE = 60_000;
const SPAN_MIN = 150; // ticks drawn from the last 150 minutes (all past: a future one is refused)
const CHILD = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../fixtures/append-env.mjs');

/** The copy tables and their triggers (once per database; the harness's, not leasejob's). */
export async function installOperatorWatch(pool, schema) {
  await pool.query(`
    CREATE SEQUENCE IF NOT EXISTS chaos_order;
    CREATE TABLE IF NOT EXISTS chaos_events (ord bigint, job text, seq bigint, kind text, window_key text,
      owner text, generation bigint, detail jsonb);
    CREATE TABLE IF NOT EXISTS chaos_pruned (ord bigint, job text, window_key text, outcome text, claimed_as text);
    CREATE OR REPLACE FUNCTION chaos_copy_event() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO public.chaos_events VALUES (nextval('public.chaos_order'), NEW.job, NEW.seq, NEW.kind,
        NEW.window_key, NEW.owner, NEW.generation, NEW.detail);
      RETURN NULL;
    END $$;
    CREATE OR REPLACE FUNCTION chaos_copy_pruned() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO public.chaos_pruned VALUES (nextval('public.chaos_order'), OLD.job, OLD.window_key, OLD.outcome,
        OLD.claimed_as);
      RETURN NULL;
    END $$;
    CREATE OR REPLACE TRIGGER chaos_copy_event AFTER INSERT ON ${schema}.events FOR EACH ROW EXECUTE FUNCTION chaos_copy_event();
    CREATE OR REPLACE TRIGGER chaos_copy_pruned AFTER DELETE ON ${schema}.windows FOR EACH ROW EXECUTE FUNCTION chaos_copy_pruned();
    GRANT INSERT ON chaos_events, chaos_pruned TO PUBLIC;
    GRANT USAGE ON SEQUENCE chaos_order TO PUBLIC;`);
}

const iso = (ms) => new Date(ms).toISOString().replace('.000Z', 'Z');

export class Operators {
  /** @param {{ url: string, schema: string, rng: object, round: number, workDir: string }} o */
  constructor({ url, schema, rng, round, workDir }) {
    const u = new URL(url);
    u.searchParams.set('options', '-c synchronous_commit=off');
    this.url = u.toString();
    this.schema = schema;
    this.rng = rng;
    this.out = path.join(workDir, `round${round}-operators.jsonl`);
    this.plain = { name: `r${round}-ops`, format: undefined };
    this.coarse = { name: `r${round}-opsday`, format: "yyyy-MM-dd'T'HH" };
    this.jobs = [this.plain, this.coarse];
    this.actions = [];
    this.children = new Set();
  }

  /** A tick of the last SPAN_MIN minutes, `back` minutes or fewer ago. */
  tick(back = SPAN_MIN) {
    const now = Math.floor(Date.now() / MINUTE) * MINUTE - MINUTE;
    return now - this.rng.int(0, back) * MINUTE;
  }

  naming(job) {
    return ['--schedule', '* * * * *', ...(job.format ? ['--window-format', job.format] : [])];
  }

  db() {
    return ['--database-url', this.url, '--schema', this.schema, '--log-level', 'warn'];
  }

  runAction(job, at, extra = []) {
    const args = ['run', ...this.db(), '--name', job.name, ...this.naming(job), '--window-from-schedule'];
    return {
      kind: extra.length ? 'catch-up' : 'run',
      job,
      // Every trigger may run a failed occurrence again (not run's default of once per occurrence).
      args: [...args, '--scheduled-time', iso(at), '--max-attempts', '1000', ...extra, ...this.child()],
    };
  }

  child() {
    return ['--', process.execPath, CHILD, this.out];
  }

  /** One action on `job`, drawn; `version` is the job's registry version, read just before (--expect-version). */
  draw(job, version) {
    const r = this.rng;
    const name = ['--name', job.name];
    const expect = version === undefined || version === null ? [] : ['--expect-version', String(version)];
    const kind = r.pick(['run', 'run', 'catch-up', 'backfill', 'prune', 'pause', 'resume', 'mark']);
    if (kind === 'run') return this.runAction(job, this.tick());
    if (kind === 'catch-up')
      return this.runAction(this.coarse, this.tick(2), ['--catch-up', '3h', '--catch-up-limit', '4']);
    if (kind === 'backfill') return this.backfill(job, 3, 40);
    if (kind === 'prune')
      return { kind, job, args: ['prune', ...this.db(), ...name, '--older-than', `${r.int(20, SPAN_MIN)}m`] };
    if (kind === 'pause')
      return { kind, job, args: ['pause', ...this.db(), ...name, '--reason', 'chaos operator', ...expect] };
    if (kind === 'resume') return { kind, job, args: ['resume', ...this.db(), ...name, ...expect] };
    const key = job.format ? iso(this.tick()).slice(0, 13) : iso(this.tick());
    const outcome = r.chance(0.5) ? '--done' : '--skipped';
    return {
      kind,
      job,
      args: ['mark', ...this.db(), ...name, '--window', key, outcome, '--reason', 'chaos', ...expect],
    };
  }

  async version(pool, job) {
    const r = await pool.query(`SELECT version FROM ${this.schema}.jobs WHERE name = $1`, [job]).catch(() => undefined);
    return r?.rows[0]?.version;
  }

  /** A backfill from a tick of the last SPAN_MIN minutes over `lo`-`hi` minutes (no later than the last tick). */
  backfill(job, lo, hi) {
    const from = this.tick();
    const to = Math.min(from + this.rng.int(lo, hi) * MINUTE, this.tick(0));
    const args = [
      'backfill',
      ...this.db(),
      '--name',
      job.name,
      ...this.naming(job),
      '--from',
      iso(from),
      '--to',
      iso(to),
    ];
    return { kind: 'backfill', job, args: [...args, ...this.child()] };
  }

  /**
   * For the aimed failover: the moment a sequence (backfill, run --catch-up) under way has just
   * completed one of its windows, so its next claim is still to come; asks for a backfill next
   * when none is under way. Resolves { job, window, action, completedAt } or undefined after
   * `limitMs`. Operators act one at a time on jobs of their own, so a completion on the job of
   * the sequence under way, ordered after it started, is that sequence's.
   */
  async sequenceStep(pool, limitMs) {
    const until = Date.now() + limitMs;
    let seen;
    while (Date.now() < until && !this.stopped) {
      const cur = this.current;
      if (!cur || (cur.kind !== 'backfill' && cur.kind !== 'catch-up')) {
        this.wantSequence = true;
        seen = undefined;
      } else {
        const { rows } = await pool
          .query(
            `SELECT max(ord)::text AS ord, (array_agg(window_key ORDER BY ord DESC))[1] AS window_key
               FROM chaos_events WHERE job = $1 AND kind = 'window-completed'`,
            [cur.job.name],
          )
          .catch(() => ({ rows: [] }));
        const ord = rows[0]?.ord ?? '0';
        if (seen && seen.action === cur && BigInt(ord) > BigInt(seen.ord) && this.current === cur)
          return { job: cur.job.name, window: rows[0].window_key, action: cur.kind, completedAt: Date.now() };
        if (!seen || seen.action !== cur) seen = { action: cur, ord };
      }
      await new Promise((r) => setTimeout(r, 25));
    }
    return undefined;
  }

  exec(action) {
    this.current = action;
    return new Promise((resolve) => {
      const startedAt = Date.now();
      const env = Object.fromEntries(
        Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|LEASEJOB_|PG[A-Z]+$)/.test(k)),
      );
      const p = spawn(process.execPath, [BIN, ...action.args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      this.children.add(p);
      let output = '';
      p.stdout.on('data', (d) => (output = (output + d).slice(-2000)));
      p.stderr.on('data', (d) => (output = (output + d).slice(-2000)));
      p.on('exit', (code, signal) => {
        this.children.delete(p);
        if (this.current === action) this.current = undefined;
        resolve({
          kind: action.kind,
          job: action.job.name,
          args: action.args.slice(1),
          startedAt,
          endedAt: Date.now(),
          code,
          signal,
          output,
        });
      });
    });
  }

  /** Actions one after another, every 0.4-2 s, until stop(); the first runs register both jobs. */
  start(pool) {
    this.stopped = false;
    this.loop = (async () => {
      for (const job of this.jobs) this.actions.push(await this.exec(this.runAction(job, this.tick(5))));
      await this.backdate(pool);
      while (!this.stopped) {
        const job = this.rng.pick(this.jobs);
        const wanted = this.wantSequence;
        this.wantSequence = false;
        // A paused job runs no sequence: resumed first (another operator's resume, as it were).
        if (wanted) this.actions.push(await this.exec(this.resumeAction(this.plain)));
        // A sequence of 10-30 windows under one lease: the aimed failover's target.
        const action = wanted ? this.backfill(this.plain, 10, 30) : this.draw(job, await this.version(pool, job.name));
        this.actions.push(await this.exec(action));
        await new Promise((r) => setTimeout(r, this.rng.int(400, 2_000)));
      }
    })();
  }

  /**
   * The jobs as if registered SPAN_MIN minutes ago: catch-up takes on no occurrence from before a
   * job's registration, so without this `run --catch-up` would find nothing to claim in a round
   * of a minute or two, and claim_window's catch-up path would go untried beside the faults.
   */
  async backdate(pool) {
    await pool
      .query(`UPDATE ${this.schema}.jobs SET created_at = now() - $2 * interval '1 minute' WHERE name = ANY($1)`, [
        this.jobs.map((j) => j.name),
        SPAN_MIN,
      ])
      .catch(() => undefined); // a fault under way: the round then tries catch-up less, no more
  }

  /** Stops drawing; the action under way ends by itself, then both jobs are resumed (a pause left over). */
  async stop() {
    this.stopped = true;
    await this.loop;
    for (const job of this.jobs) this.actions.push(await this.exec(this.resumeAction(job)));
  }

  resumeAction(job) {
    return { kind: 'resume', job, args: ['resume', ...this.db(), '--name', job.name] };
  }

  kill() {
    for (const p of this.children) p.kill('SIGKILL');
  }
}

/**
 * The operators' invariants, from the copies the triggers kept (prune deletes the originals):
 * no window key completes twice; no token held by two owners; no acquisition or claim ordered
 * after an acknowledged pause until the resume; no pruned occurrence claimed again; each ledger
 * row, as prune deleted it and as the round left it, says how it was last claimed (claimed_as,
 * what the occurrence counts read), as its latest window-claimed event does (what history
 * --by-occurrence reads).
 */
export async function checkOperators(pool, jobs, schema) {
  const { rows: events } = await pool.query(
    `SELECT ord, job, seq, kind, window_key, owner, generation::text AS generation, detail FROM chaos_events
      WHERE job = ANY($1) ORDER BY job, seq`,
    [jobs],
  );
  const { rows: pruned } = await pool.query(
    `SELECT ord, job, window_key, claimed_as FROM chaos_pruned WHERE job = ANY($1)`,
    [jobs],
  );
  const { rows: windows } = await pool.query(
    `SELECT job, window_key, claimed_as FROM "${schema}".windows WHERE job = ANY($1)`,
    [jobs],
  );
  // The rows claimed_as was checked on, by value: a round whose operators claimed nothing by
  // backfill or catch-up checks little, and the report says so.
  const claimedAs = {};
  for (const w of [...windows, ...pruned])
    claimedAs[w.claimed_as ?? 'none'] = (claimedAs[w.claimed_as ?? 'none'] ?? 0) + 1;
  return {
    violations: judgeOperators(events, pruned, windows),
    events: events.length,
    pruned: pruned.length,
    claimedAs,
  };
}

/** How a window-claimed event's detail says it was claimed (as the CLI's claimedAs). */
const claimedAs = (detail) =>
  detail?.backfill === true ? 'backfill' : detail?.role === 'catch-up' ? 'catch-up' : null;

/**
 * The rules of checkOperators on the rows it read: events in (job, seq) order, deletions; `ord`
 * orders both; the ledger rows as the round left them.
 */
export function judgeOperators(events, pruned, windows = []) {
  const violations = {
    'completes-once': [],
    'one-owner-per-token': [],
    'pause-holds': [],
    'pruned-never-runs': [],
    'claimed-as': [],
  };
  const completed = new Map();
  const owners = new Map();
  const paused = new Map();
  for (const e of events) {
    const k = `${e.job} ${e.window_key}`;
    if (e.kind === 'window-completed') {
      if (completed.has(k))
        violations['completes-once'].push(
          `${k}: completed by generation ${completed.get(k)} and again by ${e.generation}`,
        );
      completed.set(k, e.generation);
    }
    if (e.kind === 'acquired' || e.kind === 'stale-takeover') {
      const t = `${e.job} ${e.generation}`;
      if (owners.has(t) && owners.get(t) !== e.owner)
        violations['one-owner-per-token'].push(
          `${e.job}: generation ${e.generation} issued to ${owners.get(t)} and to ${e.owner}`,
        );
      owners.set(t, e.owner);
    }
    if (e.kind === 'paused') paused.set(e.job, e.seq);
    if (e.kind === 'resumed') paused.delete(e.job);
    if ((e.kind === 'acquired' || e.kind === 'stale-takeover' || e.kind === 'window-claimed') && paused.has(e.job))
      violations['pause-holds'].push(
        `${e.job}: ${e.kind} (seq ${e.seq}, ${e.window_key}) after the pause at seq ${paused.get(e.job)}`,
      );
  }
  const gone = new Map(pruned.map((p) => [`${p.job} ${p.window_key}`, Number(p.ord)]));
  for (const e of events) {
    const at = gone.get(`${e.job} ${e.window_key}`);
    if (e.kind === 'window-claimed' && at !== undefined && Number(e.ord) > at && e.detail?.rerun !== true)
      violations['pruned-never-runs'].push(`${e.job} ${e.window_key}: claimed (seq ${e.seq}) after prune deleted it`);
  }
  // Each row, as prune deleted it and as the round left it, against its latest claim since the
  // deletion before (a row made again by mark has none): claims and deletions in `ord` order.
  const wrong = (w, claim, when) => {
    const expected = claim ? claimedAs(claim.detail) : null;
    if ((w.claimed_as ?? null) !== expected)
      violations['claimed-as'].push(
        `${w.job} ${w.window_key}${when}: claimed_as ${w.claimed_as ?? 'NULL'}, its latest claim (seq ${claim?.seq ?? '-'}) says ${expected ?? 'NULL'}`,
      );
  };
  const lastClaim = new Map();
  const steps = [
    ...events.filter((e) => e.kind === 'window-claimed').map((e) => ({ ord: Number(e.ord), claim: e })),
    ...pruned.map((p) => ({ ord: Number(p.ord), prune: p })),
  ].sort((a, b) => a.ord - b.ord);
  for (const { claim, prune } of steps) {
    const row = claim ?? prune;
    const k = `${row.job} ${row.window_key}`;
    if (claim) lastClaim.set(k, claim);
    else {
      if (prune.claimed_as !== undefined) wrong(prune, lastClaim.get(k), ` (deleted by prune, ord ${prune.ord})`);
      lastClaim.delete(k);
    }
  }
  for (const w of windows) wrong(w, lastClaim.get(`${w.job} ${w.window_key}`), '');
  return violations;
}
