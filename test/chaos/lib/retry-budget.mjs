// The retry-budget actor beside the runs (issue 44): on a job of its own, a fresh occurrence
// under run's default budget (`--window-from-schedule --scheduled-time`, no --max-attempts) has
// two holders SIGKILLed mid-run, each lease released by an operator (`release --force`), then a
// run of a failing command with `--retries 2`. The invariant (judgeRetryBudget): lost attempts
// do not spend the budget, so that run makes its three tries, and a trigger after it skips.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { BIN } from './cluster.mjs';

const CHILD = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../fixtures/append-env.mjs');
const MINUTE = 60_000;
const RETRIES = 2;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const iso = (ms) => new Date(ms).toISOString().replace('.000Z', 'Z');

export class RetryBudget {
  /** @param {{ url: string, schema: string, rng: object, round: number, workDir: string }} o */
  constructor({ url, schema, rng, round, workDir }) {
    this.url = url;
    this.schema = schema;
    this.rng = rng;
    this.dir = workDir;
    this.job = `r${round}-opsretry`;
    this.actions = [];
    this.children = new Set();
    this.n = 0;
    // Each action its own tick, a minute further back than the last: always a fresh occurrence.
    this.base = Math.floor(Date.now() / MINUTE) * MINUTE - MINUTE;
  }

  /** Spawn the CLI; resolves { code, signal, output } at its exit. `onSpawn` gets the process. */
  cli(args, onSpawn) {
    return new Promise((resolve) => {
      const env = Object.fromEntries(
        Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|LEASEJOB_|PG[A-Z]+$)/.test(k)),
      );
      const p = spawn(process.execPath, [BIN, ...args], { env, stdio: ['ignore', 'ignore', 'pipe'] });
      this.children.add(p);
      onSpawn?.(p);
      let output = '';
      p.stderr.on('data', (d) => (output = (output + d).slice(-2000)));
      p.on('exit', (code, signal) => {
        this.children.delete(p);
        resolve({ code, signal, output });
      });
    });
  }

  run(tick, out, extra, mode) {
    return [
      'run',
      '--database-url',
      this.url,
      '--schema',
      this.schema,
      '--log-level',
      'warn',
      '--name',
      this.job,
      '--schedule',
      '* * * * *',
      '--window-from-schedule',
      '--scheduled-time',
      tick,
      ...extra,
      '--',
      process.execPath,
      CHILD,
      out,
      mode,
    ];
  }

  /** A holder SIGKILLed once its child runs (its guard stops the child), then its lease released. */
  async crash(tick, out) {
    const blocked = `${out}.blocked`;
    let runner;
    const first = this.cli(this.run(tick, out, ['--ttl', '60s'], `block=${tick}`), (p) => (runner = p));
    let ended = false;
    void first.then(() => (ended = true));
    const until = Date.now() + 30_000;
    while (!existsSync(blocked) && !ended && Date.now() < until) await sleep(20);
    const ran = existsSync(blocked);
    runner.kill('SIGKILL');
    await first;
    const rel = ran
      ? await this.cli(['release', '--database-url', this.url, '--schema', this.schema, '--name', this.job, '--force'])
      : undefined;
    return { ran, release: rel?.code };
  }

  async once() {
    const tick = iso(this.base - ++this.n * MINUTE);
    const out = path.join(this.dir, `${this.job}-${this.n}.jsonl`);
    const startedAt = Date.now();
    const crashes = [await this.crash(tick, out), await this.crash(tick, out)];
    const before = starts(out).length;
    const failing = await this.cli(
      this.run(tick, out, ['--retries', String(RETRIES), '--retry-delay', '1ms'], `fail=3=${tick}`),
    );
    const tries = starts(out).length - before;
    const again = await this.cli(
      this.run(tick, out, ['--retries', String(RETRIES), '--retry-delay', '1ms'], `fail=3=${tick}`),
    );
    return {
      kind: 'retry-budget',
      job: this.job,
      window: tick,
      startedAt,
      endedAt: Date.now(),
      crashes,
      tries,
      afterTries: starts(out).length - before - tries,
      codes: { failing: failing.code, again: again.code },
      code: failing.code,
      output: failing.output.slice(-600),
    };
  }

  start() {
    this.stopped = false;
    this.loop = (async () => {
      while (!this.stopped) {
        this.actions.push(await this.once());
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

  judge(lossy = []) {
    return judgeRetryBudget(this.actions, lossy);
  }
}

function starts(file) {
  return existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : [];
}

/**
 * lost-attempts-spare-retries: where both crashed holders ran and were released (exit 0), and no
 * fault that loses commits overlapped, the failing `--retries 2` run that ended with its child's
 * code (3) started its child three times, and the trigger after it started none. A run that
 * ended otherwise (a database restart cut it: 69, 75) is not judged.
 */
export function judgeRetryBudget(actions, lossy = []) {
  const v = [];
  const overlaps = (a) => lossy.some(([from, to]) => a.startedAt <= to && a.endedAt >= from - 30_000);
  for (const a of actions) {
    if (a.kind !== 'retry-budget' || overlaps(a)) continue;
    if (!a.crashes.every((c) => c.ran && c.release === 0) || a.codes.failing !== 3) continue;
    if (a.tries !== RETRIES + 1)
      v.push(
        `${a.job} ${a.window}: after two lost attempts, --retries ${RETRIES} tried ${a.tries} times, not ${RETRIES + 1}`,
      );
    else if (a.afterTries > 0)
      v.push(`${a.job} ${a.window}: a trigger after ${RETRIES + 1} failed tries started ${a.afterTries} more`);
  }
  return { 'lost-attempts-spare-retries': v };
}
