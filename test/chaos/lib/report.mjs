// The end-of-run report: faults by kind, invariants held or violated with their details, and
// the figures (takeover latency, lease loss to child stopped), as text and as one JSON line.
import { FAULT_KINDS } from './faults.mjs';
import { PENDING_INVARIANTS } from './lifecycle.mjs';

/** Nearest-rank percentile of a list of numbers (undefined when empty). */
function percentile(values, p) {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

const fmtMs = (v) =>
  v === undefined ? '-' : Math.abs(v) >= 10_000 ? `${(v / 1000).toFixed(1)} s` : `${Math.round(v)} ms`;
const stats = (values, ps) =>
  values.length === 0
    ? 'n=0'
    : `n=${values.length} ${ps.map((p) => `${p === 'max' ? 'max' : p === 'min' ? 'min' : `p${p}`} ${fmtMs(p === 'max' ? Math.max(...values) : p === 'min' ? Math.min(...values) : percentile(values, p))}`).join(' ')}`;

const INVARIANTS = [
  [
    'fencing',
    'no unit committed by a generation after the next one was acquired or after its release (commit timestamps)',
  ],
  [
    'exactly-once',
    'every unit of a completed window once; no window completed or claimed twice; effect tokens never go down per key',
  ],
  ['completion', 'every window completed eventually (faults stopped, up to 3 clean reruns)'],
  [
    'generations',
    'per job, generations +1 at each acquisition in event order (after a server start: above it); no event ahead of its generation',
  ],
  [
    'child-lifetime',
    'no child outlives its lease (see checks.mjs for the exact rule); pauses and kills by their own rules',
  ],
  ['one-live-child', 'at most one live child per job at any time (runs across a failover excepted)'],
  [
    'exit-codes',
    'exit codes match what happened (0 done/skipped, 75 lost, 69 outage, 70 guard stopped, SIGKILL when killed)',
  ],
  ['completes-once', "operators' jobs: no window key completes twice (events kept aside from prune)"],
  [
    'one-owner-per-token',
    "operators' jobs: no token issued to two owners (crash restarts with synchronous_commit = off)",
  ],
  ['pause-holds', "operators' jobs: no acquisition or claim after an acknowledged pause until the resume"],
  ['pruned-never-runs', "operators' jobs: no occurrence claimed again once prune deleted its window"],
  [
    'claimed-as',
    "operators' jobs: each ledger row's claimed_as (backfill, catch-up, none) is what its latest claim says",
  ],
  [
    'release-spends-budget',
    "lifecycle: a crashed holder's window released by `release --force`, triggered again under --max-attempts 1, never starts twice",
  ],
  [
    'schedule-change-not-due',
    'lifecycle: after a schedule change, check lists no occurrence of the new schedule from before it that no run claimed (nor of the old)',
  ],
  [
    'tokens-never-go-back',
    "lifecycle: the embedded store's tokens only grow, across its state file restored (renamed over, or copied over its own bytes)",
  ],
  [
    'scrapes-answer',
    'a scrape flood beside the runs (300 concurrent /metrics, then one more): every request answered 200 with a whole exposition',
  ],
  [
    'lost-attempts-spare-retries',
    "run's default budget: after two crashed and released holders, a failing --retries 2 run tries three times, then a trigger skips",
  ],
  [
    'contenders',
    'one winner per 50-contender window (another claim only after the winner logged a lease loss); contenders exit 0, or 75 after a loss',
  ],
  [
    'budget',
    'a runner given --max-attempts never starts its child past the budget; per window, budgeted child starts <= the budget',
  ],
  [
    'replace',
    '--on-busy replace only asks an earlier occurrence to stop; a replaced window completes later; the replaced run exits 75',
  ],
];

export function summarize({
  seed,
  bounded,
  durationS,
  isolation,
  rounds,
  notes,
  skippedKinds,
  clockOffsetMs,
  elapsedMs,
}) {
  const faults = {};
  const missed = {};
  for (const k of FAULT_KINDS) faults[k.kind] = 0;
  const invariants = {};
  for (const [name] of INVARIANTS.filter(([n]) => !PENDING_INVARIANTS.has(n)))
    invariants[name] = { violations: 0, details: [] };
  const fig = { takeoverMs: [], lossToStopMs: [], pdeathMs: [], marginMs: [] };
  const exits = {};
  const hosts = {};
  const events = {};
  const effects = { attempts: 0, items: 0, repeatedItems: 0, itemsUnderSeveralTokens: 0 };
  let runs = 0;
  let crowdClaims = 0;
  const lostHistory = { generations: 0, windows: 0, completedAgain: 0 };
  let exhaustedSkips = 0;
  let budgetedStartsMax = 0;
  const scrapeFlood = { floods: 0, requests: 0, legitMs: [] };
  const claimedAs = {};
  const operators = {};
  let windows = 0;
  let units = 0;
  for (const r of rounds) {
    for (const f of r.faults) {
      if (f.injected) faults[f.kind] += 1;
      else missed[f.kind] = [...(missed[f.kind] ?? []), f.note];
    }
    for (const [name, list] of r.check.invariants) {
      invariants[name].violations += list.length;
      invariants[name].details.push(...list.map((d) => `round ${r.round}: ${d}`));
    }
    for (const key of Object.keys(fig)) fig[key].push(...r.check.figures[key]);
    for (const [k, v] of Object.entries(r.check.figures.events)) events[k] = (events[k] ?? 0) + v;
    for (const [k, v] of Object.entries(r.check.figures.effects)) effects[k] += v;
    for (const run of r.runs) {
      const x = run.signal ?? String(run.code);
      exits[x] = (exits[x] ?? 0) + 1;
      const h = (hosts[run.host] ??= { runs: 0, held: 0 });
      h.runs += 1;
      if (run.generation !== undefined) h.held += 1;
    }
    runs += r.runs.length;
    for (const a of r.operators ?? []) {
      const o = (operators[a.kind] ??= { runs: 0, exits: {} });
      o.runs += 1;
      o.exits[a.signal ?? String(a.code)] = (o.exits[a.signal ?? String(a.code)] ?? 0) + 1;
    }
    crowdClaims += r.check.figures.crowdClaims ?? 0;
    for (const [k, v] of Object.entries(r.check.figures.lostHistory ?? {})) lostHistory[k] += v;
    exhaustedSkips += r.check.figures.exhaustedSkips ?? 0;
    budgetedStartsMax = Math.max(budgetedStartsMax, r.check.figures.budgetedStartsMax ?? 0);
    if (r.check.figures.scrapeFlood) {
      scrapeFlood.floods += r.check.figures.scrapeFlood.floods;
      scrapeFlood.requests += r.check.figures.scrapeFlood.requests;
      scrapeFlood.legitMs.push(...r.check.figures.scrapeFlood.legitMs);
    }
    for (const [k, v] of Object.entries(r.check.figures.claimedAs ?? {})) claimedAs[k] = (claimedAs[k] ?? 0) + v;
    windows += r.windows;
    units += r.units;
  }
  const violations = Object.values(invariants).reduce((n, i) => n + i.violations, 0);
  return {
    seed,
    bounded,
    durationS,
    isolation,
    rounds: rounds.length,
    elapsedS: Math.round(elapsedMs / 1000),
    roundTimes: rounds.map((r) => r.times),
    notes,
    skippedKinds,
    clockOffsetMs,
    faults,
    missedFaults: missed,
    invariants,
    violations,
    budget: { exhaustedSkips, budgetedStartsMax },
    scrapeFlood: {
      floods: scrapeFlood.floods,
      requests: scrapeFlood.requests,
      legitMs: stats(scrapeFlood.legitMs, [50, 'max']),
    },
    claimedAs,
    operators,
    figures: {
      takeoverAfterCrashMs: {
        n: fig.takeoverMs.length,
        p50: percentile(fig.takeoverMs, 50),
        p99: percentile(fig.takeoverMs, 99),
      },
      leaseLossToChildStoppedMs: {
        n: fig.lossToStopMs.length,
        p50: percentile(fig.lossToStopMs, 50),
        max: fig.lossToStopMs.length ? Math.max(...fig.lossToStopMs) : undefined,
      },
      childGoneAfterRunnerKillMs: {
        n: fig.pdeathMs.length,
        p50: percentile(fig.pdeathMs, 50),
        max: fig.pdeathMs.length ? Math.max(...fig.pdeathMs) : undefined,
      },
      childEndBeforeLeaseExpiryMs: {
        n: fig.marginMs.length,
        min: fig.marginMs.length ? Math.min(...fig.marginMs) : undefined,
        p50: percentile(fig.marginMs, 50),
      },
    },
    raw: fig,
    runs,
    windows,
    units,
    exits,
    hosts,
    events,
    effects,
    crowdClaims,
    lostHistory,
  };
}

export function printReport(s, out = process.stdout) {
  const w = (line = '') => out.write(`${line}\n`);
  w();
  w(
    `=== leasejob chaos report: seed ${s.seed}, ${s.rounds} round(s) of ${s.durationS} s faults${s.bounded ? ' (bounded)' : ''}${s.isolation !== 'read committed' ? `, default isolation ${s.isolation}` : ''}, ${s.elapsedS} s in all ===`,
  );
  for (const [i, t] of s.roundTimes.entries())
    w(`round ${i + 1}: faults ${t.faultsS} s, drain ${t.drainS} s, settle ${t.settleS} s, checks ${t.checkS} s`);
  w(
    `runs ${s.runs}, windows ${s.windows}, units written ${s.units}; harness-vs-database clock offset ${Math.round(s.clockOffsetMs)} ms`,
  );
  for (const n of s.notes) w(`note: ${n}`);
  w();
  w('faults by kind:');
  for (const k of FAULT_KINDS) {
    const skipped = s.skippedKinds[k.kind];
    const missed = s.missedFaults[k.kind];
    w(
      `  ${k.kind.padEnd(18)} ${String(s.faults[k.kind]).padStart(3)}  ${skipped ? `SKIPPED: ${skipped}` : k.what}${missed ? `  (not injected ${missed.length}x: ${[...new Set(missed)].join('; ')})` : ''}`,
    );
  }
  w();
  w('operator actions (by exit):');
  for (const [kind, o] of Object.entries(s.operators ?? {}))
    w(
      `  ${kind.padEnd(18)} ${String(o.runs).padStart(3)}  ${Object.entries(o.exits)
        .map(([x, n]) => `${x}: ${n}`)
        .join(', ')}`,
    );
  w();
  w('invariants:');
  for (const [name, what] of INVARIANTS) {
    if (PENDING_INVARIANTS.has(name)) {
      w(`  ${name.padEnd(15)} pending   ${what} (its store fix is not merged: judged, printed above, not counted)`);
      continue;
    }
    const inv = s.invariants[name];
    w(`  ${name.padEnd(15)} ${inv.violations === 0 ? 'held    ' : `VIOLATED ${inv.violations}x`}  ${what}`);
    for (const d of inv.details.slice(0, 20)) w(`      - ${d}`);
    if (inv.details.length > 20) w(`      ... ${inv.details.length - 20} more`);
  }
  w();
  w('figures:');
  w(`  takeover latency after a crash (kill -> next stale-takeover): ${stats(s.raw.takeoverMs, [50, 99])}`);
  w(`  lease loss (runner logs it) -> child stopped: ${stats(s.raw.lossToStopMs, [50, 'max'])}`);
  w(`  runner SIGKILL -> child gone: ${stats(s.raw.pdeathMs, [50, 'max'])}`);
  w(`  child end before its lease's last possible expiry (positive = before): ${stats(s.raw.marginMs, ['min', 50])}`);
  w(`  claims on 50-contender windows: ${s.crowdClaims} (1 per window unless a winner lost its lease)`);
  if (s.scrapeFlood?.floods > 0)
    w(
      `  scrape floods: ${s.scrapeFlood.floods} (${s.scrapeFlood.requests} requests), the scrape beside each: ${s.scrapeFlood.legitMs}`,
    );
  const lh = s.lostHistory;
  if (lh.generations > 0)
    w(
      `  lost history (failover, restore in place): ${lh.generations} generations that ran children forgotten, on ${lh.windows} windows, ${lh.completedAgain} of them completed again`,
    );
  w(
    `  attempt budget (--max-attempts): exhausted skips ${s.budget.exhaustedSkips}, most budgeted child starts for one window ${s.budget.budgetedStartsMax}`,
  );
  w(
    `  operators' ledger rows checked for claimed-as: ${
      Object.entries(s.claimedAs ?? {})
        .map(([k, v]) => `${k} ${v}`)
        .join(', ') || 'none'
    }`,
  );
  w(
    `  runs by host (held a lease): ${Object.entries(s.hosts)
      .map(([k, v]) => `${k} ${v.runs} (${v.held})`)
      .join(', ')}`,
  );
  w(
    `  exit codes: ${Object.entries(s.exits)
      .sort()
      .map(([k, v]) => `${k}=${v}`)
      .join(' ')}`,
  );
  w(
    `  events: ${Object.entries(s.events)
      .sort()
      .map(([k, v]) => `${k}=${v}`)
      .join(' ')}`,
  );
  w(
    `  effects: ${s.effects.attempts} attempted for ${s.effects.items} items; ${s.effects.repeatedItems} items attempted more than once, ${s.effects.itemsUnderSeveralTokens} under several tokens (absorbed by the idempotency key)`,
  );
  w();
  w(s.violations === 0 ? 'RESULT: every invariant held' : `RESULT: ${s.violations} invariant violation(s)`);
  const { raw, ...json } = s;
  w(`CHAOS-REPORT ${JSON.stringify(json)}`);
}
