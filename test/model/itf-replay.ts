// Replays a trace of the protocol's specification (docs/spec/leasejob.qnt, `quint run --mbt
// --step mbtStep`, ITF JSON) on one store through the model-based harness: each of the spec's
// whole commands becomes the harness's step of the same name, run through the built CLI and
// compared with the reference model as every step is (harness.ts), and then the spec's own
// state after that command is compared with the reference model's. So the spec, the model and
// the store are checked against one another.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { TestDb } from '../helpers/db.js';
import {
  cleanup,
  compareExporter,
  parseStep,
  setup,
  type Model,
  type Real,
  type Store,
  type StoreKind,
} from './harness.js';
import { HOUR, SCHEDULES, closed, stateClass, tickOf, windowKey } from './occurrence-model.js';

/** An ITF value decoded: bigints as numbers, tuples and sets as arrays, maps as arrays of pairs. */
type Value = number | string | boolean | Value[] | { [k: string]: Value };
export function decode(v: unknown): Value {
  if (Array.isArray(v)) return v.map(decode);
  if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    if ('#bigint' in o) return Number(o['#bigint']);
    if ('#tup' in o) return (o['#tup'] as unknown[]).map(decode);
    if ('#set' in o) return (o['#set'] as unknown[]).map(decode);
    if ('#map' in o) return (o['#map'] as unknown[][]).map(([k, w]) => [decode(k), decode(w)]);
    return Object.fromEntries(Object.entries(o).map(([k, w]) => [k, decode(w)]));
  }
  return v as Value;
}

/** The part of the spec's state the replay compares (leasejob.qnt's S). */
export interface SpecState {
  maxAttempts: number;
  store: {
    paused: boolean;
    schedule: number;
    prunedK: number;
    ledger: Array<[[number, number], { attempts: number; outcome: string }]>;
  };
  starts: Array<[[number, number], number]>;
  lastAction: string;
}

export interface SpecStep {
  action: string;
  picks: Record<string, Value>;
  state: SpecState;
}

/** The steps of an ITF trace: each state's action, its nondeterministic picks, the spec's state. */
export function readTrace(file: string): SpecStep[] {
  const itf = JSON.parse(readFileSync(file, 'utf8')) as { states: Array<Record<string, unknown>> };
  return itf.states.map((st) => {
    const key = Object.keys(st).find((k) => k === 's' || k.endsWith('::s'));
    if (!key) throw new Error(`${path.basename(file)}: no state variable s in the trace`);
    const picks = decode(st['mbt::nondetPicks'] ?? {}) as Record<string, { tag: string; value: Value }>;
    return {
      action: String(st['mbt::actionTaken'] ?? ''),
      picks: Object.fromEntries(
        Object.entries(picks)
          .filter(([, p]) => p.tag === 'Some')
          .map(([k, p]) => [k, p.value]),
      ),
      state: decode(st[key]) as unknown as SpecState,
    };
  });
}

/**
 * A spec command as the harness's step (test/model/README.md): the same names, the same
 * occurrences (k hours back, on the job's current schedule).
 */
export function stepText(s: SpecStep): string {
  const p = s.picks;
  const fails = p.fails === true ? ',fails' : '';
  switch (s.action) {
    case 'mbtRun':
      return `run(k=${p.k}${fails}${p.retry === 'none' ? '' : `,${p.retry}`})`;
    case 'mbtRerun':
      return `rerun(k=${p.k}${fails})`;
    case 'mbtCrash':
      return `crash(k=${p.k},${p.ending})`;
    case 'mbtReplace':
      return `replace(k=${p.k1} by k=${p.k2}${fails})`;
    case 'mbtMark':
      return `mark(k=${p.k},${p.how === 'marked-done' ? 'done' : 'skipped'})`;
    case 'mbtPause':
      return 'pause';
    case 'mbtResume':
      return 'resume';
    case 'mbtPrune':
      return 'prune(3h)';
    case 'mbtScheduleChange':
      return `schedule-change(k=${p.k})`;
    case 'mbtBackup':
      return 'backup';
    case 'mbtRestore':
      return 'restore';
  }
  throw new Error(`the spec's action ${s.action} has no harness step (a trace of mbtStep or mbtStepPg only)`);
}

/** The store's outcome of a spec row as the model's coarse state (occurrence-model.ts stateClass). */
function specClass(maxAttempts: number, r: { attempts: number; outcome: string }): string {
  if (['completed', 'marked-done', 'marked-skipped', 'paused-skipped'].includes(r.outcome)) return 'closed';
  if (r.attempts >= maxAttempts) return 'exhausted';
  return r.attempts > 0 ? 'open' : 'none';
}

/**
 * The spec's state after a step against the reference model's: pause, schedule, and per
 * occurrence the attempts, the coarse state and the child starts. An occurrence either side
 * calls pruned is left out from then on: the spec's retention horizon is "k >= 3", the model's
 * the clock's three hours back, which for the :30 schedule depends on the minute of the run.
 */
export function compareSpec(spec: SpecState, m: Model, r: Real, skip: Set<string>): string | undefined {
  if (spec.store.paused !== m.job.paused) return `paused: spec ${spec.store.paused}, model ${m.job.paused}`;
  if (SCHEDULES[spec.store.schedule] !== m.job.schedule)
    return `schedule: spec ${SCHEDULES[spec.store.schedule]}, model ${m.job.schedule}`;
  const starts = new Map(spec.starts.map(([[sc, k], n]) => [`${sc}:${k}`, n]));
  for (const [[sc, k], row] of spec.store.ledger) {
    const key = windowKey(r.base - k * HOUR + sc * 30 * 60_000);
    const id = `${sc}:${k}`;
    if (k >= spec.store.prunedK || tickOf(key) < m.job.prunedBefore) skip.add(id);
    if (skip.has(id)) continue;
    const o = m.job.occ.get(key) ?? { attempts: 0, status: 'none' as const };
    const want = stateClass(m.job, o);
    const got = specClass(spec.maxAttempts, row);
    if (got !== want || row.attempts !== o.attempts)
      return `occurrence ${key}: spec ${got} (${row.outcome}, ${row.attempts} attempts), model ${want} (${o.status}, ${o.attempts} attempts${closed(o) ? ', closed' : ''})`;
    if ((starts.get(id) ?? 0) !== (m.starts.get(key) ?? 0))
      return `occurrence ${key}: spec ${starts.get(id) ?? 0} child starts, model ${m.starts.get(key) ?? 0}`;
  }
  return undefined;
}

/** Thrown when the spec, the model or the store disagree: says which, at which step, and the trace. */
export class TraceDisagreement extends Error {}

/** One trace on one store: a fresh job with the trace's budget, its steps, the exporter at the end. */
export async function replayTrace(store: Store, file: string): Promise<{ steps: string[] }> {
  const trace = readTrace(file);
  const first = trace[0]!.state;
  const { model, real } = await setup(store, first.maxAttempts);
  const skip = new Set<string>();
  const done: string[] = [];
  const fail = (what: string): never => {
    throw new TraceDisagreement(`${store.kind}: ${what}\n  trace: ${file}\n  steps: ${done.join(' -> ')}`);
  };
  try {
    for (const s of trace.slice(1)) {
      const text = stepText(s);
      done.push(text);
      const cmd = parseStep(text);
      if (!cmd.check(model)) fail(`the spec took ${text}, which the reference model does not allow here`);
      const before = real.steps.length;
      try {
        await cmd.run(model, real);
      } catch (e) {
        fail(`the store and the reference model disagree at ${text}: ${(e as Error).message}`);
      }
      if (real.steps.length === before) fail(`the spec took ${text}, which the harness skipped as not possible here`);
      const diff = compareSpec(s.state, model, real, skip);
      if (diff) fail(`the spec and the reference model disagree after ${text}: ${diff}`);
    }
    await compareExporter(model, real);
    return { steps: done };
  } finally {
    cleanup(real);
  }
}

/** The harness's store for a replay (as test/model/suite.ts makes it for the model's runs). */
export function replayStore(kind: StoreKind, db: () => TestDb | undefined): Store {
  return {
    kind,
    conn: (dir: string): string[] =>
      kind === 'sqlite'
        ? ['--state-file', path.join(dir, 'leasejob.db')]
        : ['--database-url', db()!.url, '--schema', db()!.schema],
    backdate: async (conn, job, ms) => {
      if (kind === 'postgres') {
        await db()!.rows(
          `UPDATE ${db()!.schema}.jobs SET created_at = created_at - $2 * interval '1 millisecond' WHERE name = $1`,
          [job, ms],
        );
        return;
      }
      const file = new Database(conn[1]!);
      try {
        file.prepare('UPDATE jobs SET created_at = created_at - ? WHERE name = ?').run(ms, job);
      } finally {
        file.close();
      }
    },
  };
}
