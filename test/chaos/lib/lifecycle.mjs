// Lifecycle actors beside the operators (issue 19), each on a job of its own, one action every
// 0.4-2 s through the real CLI while the round's faults hit the database: a holder crashed and
// its lease released by an operator (`release --force`) before the same occurrence is triggered
// again under `--max-attempts 1`; a schedule change adopted by the registry, then `check --json`;
// an embedded store whose state file is copied aside and later restored in place. Each has its
// promise as an invariant (judgeLifecycle): a released crash spent the budget, an occurrence of
// a new schedule from before the change is never due, tokens never go back across a restore.
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { BIN } from './cluster.mjs';
import { readPidFile, signalPid } from '../../helpers/signal.mjs';

const MINUTE = 60_000;
const CHILD = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../fixtures/append-env.mjs');
/**
 * Invariants whose store fixes (issue 19) are not in this checkout, told by the embedded store's
 * schedule_since step (whatever its number): judged and printed, not counted as violations (nor
 * listed in the report) until then.
 */
const FIXED = readdirSync(new URL('../../../sql/sqlite/', import.meta.url)).some((f) =>
  /_schedule_since\.sql$/.test(f),
);
export const PENDING_INVARIANTS = new Set(
  FIXED ? [] : ['release-spends-budget', 'schedule-change-not-due', 'tokens-never-go-back'],
);

/** The schedules a schedule change alternates between: no tick of one is a tick of the other. */
export const SCHEDULES = ['*/2 * * * *', '1-59/2 * * * *'];
const iso = (ms) => new Date(ms).toISOString().replace('.000Z', 'Z');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The latest tick of schedule `i` (even or odd minutes) at least a minute before `now`. */
export function latestTick(i, now) {
  let t = Math.floor(now / MINUTE) * MINUTE - MINUTE;
  if ((t / MINUTE) % 2 !== i) t -= MINUTE;
  return t;
}

export class Lifecycle {
  /** @param {{ url: string, schema: string, rng: object, round: number, workDir: string }} o */
  constructor({ url, schema, rng, round, workDir }) {
    this.url = url;
    this.schema = schema;
    this.rng = rng;
    this.dir = workDir;
    this.rel = `r${round}-opsrel`;
    this.sched = `r${round}-opssched`;
    this.file = `r${round}-opsfile`;
    this.stateFile = path.join(workDir, `round${round}-embedded.db`);
    this.fileOut = path.join(workDir, `round${round}-embedded-starts.jsonl`);
    this.actions = [];
    this.children = new Set();
    this.n = 0;
    this.scheduleIndex = 0;
    this.backedUp = false;
  }

  db() {
    return ['--database-url', this.url, '--schema', this.schema, '--log-level', 'warn'];
  }

  /** Spawn the CLI; resolves { code, signal, stdout, output } at its exit. `onSpawn` gets the process. */
  cli(args, onSpawn) {
    return new Promise((resolve) => {
      const env = Object.fromEntries(
        Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|LEASEJOB_|PG[A-Z]+$)/.test(k)),
      );
      const p = spawn(process.execPath, [BIN, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      this.children.add(p);
      onSpawn?.(p);
      let stdout = '';
      let output = '';
      p.stdout.on('data', (d) => (stdout += d));
      p.stderr.on('data', (d) => (output = (output + d).slice(-2000)));
      p.on('exit', (code, signal) => {
        this.children.delete(p);
        resolve({ code, signal, stdout, output });
      });
    });
  }

  /**
   * A run of a fresh window under --max-attempts 1 whose child blocks; the runner and its child
   * SIGKILLed once it runs; `release --force`; the same window triggered again: it must skip.
   */
  async crashRelease() {
    const window = `c${++this.n}`;
    const out = path.join(this.dir, `${this.rel}-${window}.jsonl`);
    const startedAt = Date.now();
    const run = (mode) => [
      'run',
      ...this.db(),
      '--name',
      this.rel,
      '--window',
      window,
      '--max-attempts',
      '1',
      '--',
      process.execPath,
      CHILD,
      out,
      ...(mode ? [mode] : []),
    ];
    let runner;
    const first = this.cli(run(`block=${window}`), (p) => (runner = p));
    let ended = false;
    void first.then(() => (ended = true));
    const until = Date.now() + 30_000;
    while (!existsSync(`${out}.blocked`) && !ended && Date.now() < until) await sleep(20);
    const blocked = existsSync(`${out}.blocked`);
    if (blocked) {
      runner.kill('SIGKILL');
      const child = readPidFile(`${out}.blocked`);
      if (child !== undefined) signalPid(child, 'SIGKILL'); // false: gone with its runner
    } else runner.kill('SIGKILL');
    const crash = await first;
    const release = blocked ? await this.cli(['release', ...this.db(), '--name', this.rel, '--force']) : undefined;
    const again = blocked ? await this.cli(run()) : undefined;
    return {
      kind: 'crash-release',
      job: this.rel,
      window,
      out,
      blocked,
      startedAt,
      endedAt: Date.now(),
      codes: { crash: crash.code ?? crash.signal, release: release?.code, again: again?.code },
      code: again?.code ?? crash.code,
      signal: again ? null : crash.signal,
      output: (release?.output ?? '') + (again?.output ?? ''),
    };
  }

  /** A run under the other schedule (the registry adopts it), then `check --json` of the job. */
  async scheduleChange() {
    const i = (this.scheduleIndex = 1 - this.scheduleIndex);
    const startedAt = Date.now();
    const tick = iso(latestTick(i, startedAt));
    const r = await this.cli([
      'run',
      ...this.db(),
      '--name',
      this.sched,
      '--schedule',
      SCHEDULES[i],
      '--window-from-schedule',
      '--alert-after',
      '1s',
      '--scheduled-time',
      tick,
      '--',
      process.execPath,
      CHILD,
      path.join(this.dir, `${this.sched}.jsonl`),
    ]);
    const change = {
      kind: 'schedule-change',
      job: this.sched,
      schedule: i,
      tick,
      startedAt,
      endedAt: Date.now(),
      code: r.code,
    };
    this.actions.push(change);
    return await this.check(i);
  }

  async check(schedule) {
    const startedAt = Date.now();
    const r = await this.cli(['check', ...this.db(), '--name', this.sched, '--json']);
    let due;
    try {
      due = JSON.parse(r.stdout)
        .problems.filter((p) => p.kind === 'not-completed' || p.kind === 'overdue')
        .flatMap((p) => p.occurrences ?? [])
        .map((o) => ({ window: o.window, scheduledAt: o.scheduledAt }));
    } catch {
      due = undefined; // no answer (a fault under way): nothing to judge
    }
    return { kind: 'check', job: this.sched, schedule, startedAt, endedAt: Date.now(), code: r.code, due };
  }

  /** Embedded store: a run of a fresh window; now and then the state file backed up, or restored. */
  async embedded() {
    // A backup only of a store that exists: restoring "nothing" would delete the store, not restore it.
    let what =
      this.backedUp && this.rng.chance(0.3)
        ? 'restore'
        : existsSync(this.stateFile) && this.rng.chance(0.25)
          ? 'backup'
          : 'run';
    const startedAt = Date.now();
    const files = [this.stateFile, `${this.stateFile}-wal`, `${this.stateFile}-shm`];
    if (what === 'backup') {
      for (const f of files) {
        rmSync(`${f}.bak`, { force: true });
        if (existsSync(f)) copyFileSync(f, `${f}.bak`);
      }
      this.backedUp = true;
    } else if (what === 'restore') {
      // Half the time a new file renamed over the live one, as a host restore or a copied volume
      // gives; else copied over the live file's own bytes (`cp backup.db state.db`: same inode,
      // same boot, issue 44), which only the tokens' hybrid logical clock keeps from going back.
      const inPlace = this.rng.chance(0.5);
      for (const f of files) {
        if (!existsSync(`${f}.bak`)) rmSync(f, { force: true });
        else if (inPlace) copyFileSync(`${f}.bak`, f);
        else {
          copyFileSync(`${f}.bak`, `${f}.new`);
          renameSync(`${f}.new`, f);
        }
      }
      if (inPlace) what = 'restore-in-place';
    }
    const r = await this.cli([
      'run',
      '--state-file',
      this.stateFile,
      '--log-level',
      'warn',
      '--name',
      this.file,
      '--window',
      `e${++this.n}`,
      '--',
      process.execPath,
      CHILD,
      this.fileOut,
    ]);
    return { kind: `embedded-${what}`, job: this.file, startedAt, endedAt: Date.now(), code: r.code, output: r.output };
  }

  /** Actions one after another until stop(); the schedule job's registration set 150 minutes back. */
  start(pool) {
    this.stopped = false;
    this.loop = (async () => {
      this.actions.push(await this.scheduleChange());
      await pool
        .query(`UPDATE ${this.schema}.jobs SET created_at = now() - interval '150 minutes' WHERE name = $1`, [
          this.sched,
        ])
        .catch(() => undefined);
      while (!this.stopped) {
        const kind = this.rng.pick(['crash-release', 'schedule-change', 'embedded', 'embedded']);
        if (kind === 'crash-release') this.actions.push(await this.crashRelease());
        else if (kind === 'schedule-change') this.actions.push(await this.scheduleChange());
        else this.actions.push(await this.embedded());
        await sleep(this.rng.int(400, 2_000));
      }
    })();
  }

  async stop() {
    this.stopped = true;
    await this.loop;
  }

  kill() {
    for (const p of this.children) p.kill('SIGKILL');
  }

  /** The invariants on what the actors did; `lossy`: [from, to] ms of faults that lose commits. */
  judge(lossy = []) {
    const starts = (file) =>
      existsSync(file)
        ? readFileSync(file, 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l))
        : [];
    const crashes = this.actions
      .filter((a) => a.kind === 'crash-release')
      .map((a) => ({ ...a, starts: starts(a.out).length }));
    const tokens = starts(this.fileOut).map((l) => l.FENCE_TOKEN);
    return judgeLifecycle({ actions: this.actions, crashes, tokens, lossy });
  }
}

/**
 * The rules, on what the actors recorded:
 * - release-spends-budget: a crashed holder's window released by an operator then triggered again
 *   under --max-attempts 1 started its child once, and the trigger after the release exited 0
 *   (it skipped the exhausted occurrence), unless a fault that loses commits overlapped it;
 * - schedule-change-not-due: after a schedule change the registry adopted (exit 0), `check` lists
 *   no occurrence scheduled before the change that no run claimed (the change runs claim one
 *   tick each, perhaps left unfinished by a fault: those are judged as any claimed one), nor
 *   one of the other schedule;
 * - tokens-never-go-back: the embedded store's tokens, in start order, only grow, across restores.
 */
export function judgeLifecycle({ actions, crashes, tokens, lossy }) {
  const violations = { 'release-spends-budget': [], 'schedule-change-not-due': [], 'tokens-never-go-back': [] };
  const overlaps = (a) => lossy.some(([from, to]) => a.startedAt <= to && a.endedAt >= from - 30_000);
  for (const c of crashes) {
    if (!c.blocked || overlaps(c)) continue;
    if (c.starts > 1)
      violations['release-spends-budget'].push(
        `${c.job} ${c.window}: ${c.starts} child starts under --max-attempts 1 (crash, release exit ${c.codes.release}, again exit ${c.codes.again})`,
      );
    else if (c.codes.release === 0 && c.codes.again !== 0 && c.codes.again !== 69)
      violations['release-spends-budget'].push(
        `${c.job} ${c.window}: the trigger after the release exited ${c.codes.again}, not 0 (exhausted skip)`,
      );
  }
  let change;
  // The schedule the registry holds, when known: a run that failed (exit 69: adopted or not) makes
  // it unknown, and the next run is then no change to judge by (its schedule may have been the
  // registry's already, since a tick the checks rightly call due), only what the registry holds.
  let registry;
  let sure = true;
  const claimed = new Set(actions.filter((a) => a.kind === 'schedule-change').map((a) => a.tick));
  for (const a of actions) {
    if (a.kind === 'schedule-change') {
      if (a.code !== 0 || overlaps(a)) [change, registry, sure] = [undefined, undefined, false];
      else {
        if (registry === undefined ? sure : registry !== a.schedule) change = a;
        registry = a.schedule;
      }
    }
    if (a.kind !== 'check' || !change || !a.due) continue;
    for (const o of a.due.filter((d) => !claimed.has(d.window))) {
      const at = Date.parse(o.scheduledAt);
      const parity = (at / MINUTE) % 2;
      if (at < change.startedAt - 1_000 || parity !== change.schedule)
        violations['schedule-change-not-due'].push(
          `${a.job}: check at ${iso(a.startedAt)} lists ${o.window} as due, scheduled before the change to ` +
            `${SCHEDULES[change.schedule]} at ${iso(change.startedAt)} or not of it`,
        );
    }
  }
  let last = -1n;
  tokens.forEach((t, i) => {
    const v = BigInt(t);
    if (v <= last) violations['tokens-never-go-back'].push(`embedded start ${i + 1}: token ${v} after ${last}`);
    if (v > last) last = v;
  });
  return violations;
}
