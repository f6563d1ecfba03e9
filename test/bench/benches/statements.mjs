// Statements per run, counted on the server.
//
// Method (default): pg_stat_statements, preloaded at server start with track=all. Rows with
// toplevel=true are the statements a client sent (each one a round trip); toplevel=false rows
// are the statements PL/pgSQL ran inside our functions (server work, reported for information).
// Runners connect as `postgres`; the bench reads the statistics as `bench_observer`, so
// filtering on userid leaves exactly what leasejob sent. Deltas of two snapshots around each
// measured process, while nothing else runs as `postgres`.
// Fallback (--stmt-method log, or no pg_stat_statements): log_statement=all with the
// application name in the log prefix, parsed from the server's stderr.
//
// Scenarios:
//   plain:   run --window <new> -- true            acquire+claim, complete+release
//   renew:   run --ttl 3s --window <new> -- sleep 3.5   + one per renewal (renewals counted in
//            the runner's own debug log: 'lease renewed')
//   skip:    a contender facing a live owner (owner with TTL 90s: no renewal during it)
//   done:    a late duplicate of a completed window
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { BIN, NODE, logLines, sleep, stampCmd, start, waitStamp } from '../lib/proc.mjs';

const KINDS = [
  ['acquire', /\.acquire\(/],
  ['renew', /\.renew\(/],
  ['finish', /\.finish\(/],
  ['record_event', /record_event\(/],
];
const kindOf = (q) => KINDS.find(([, re]) => re.test(q))?.[0] ?? 'other';

export async function run(ctx) {
  const counter = ctx.pgss ? await pgssCounter(ctx) : await logCounter(ctx);
  const n = ctx.n(5, 1);
  const job = ctx.uid('stmt');
  let w = 0;
  const leasejob = (args) => start(NODE, [BIN, ...args], { env: ctx.env });
  const runArgs = (extra, cmd) => [
    'run',
    '--name',
    job,
    '--schema',
    ctx.schema,
    ...extra,
    '--window',
    `w${++w}`,
    '--',
    ...cmd,
  ];
  const res = { plain: [], renew: [], skip: [], done: [] };
  const renewals = [];
  const renewFailures = [];
  const errors = [];

  // Interleaved: each iteration runs every scenario once.
  for (let i = 0; i < n; i++) {
    // plain
    {
      const snap = await counter.snapshot();
      const r = await leasejob(runArgs([], ['true'])).done;
      if (r.code !== 0) errors.push(`plain exit ${r.code}: ${r.stderr.slice(-200)}`);
      res.plain.push(await counter.delta(snap));
    }
    // done: the same window again (w is the one just completed)
    {
      const snap = await counter.snapshot();
      const r = await leasejob(['run', '--name', job, '--schema', ctx.schema, '--window', `w${w}`, '--', 'true']).done;
      if (r.code !== 0) errors.push(`done exit ${r.code}`);
      res.done.push(await counter.delta(snap));
    }
    // renew: TTL 3 s (renew every 1 s), child 3.5 s -> about 3 renewals
    {
      const snap = await counter.snapshot();
      const r = await leasejob(
        runArgs(['--ttl', '3s', '--kill-grace', '500ms', '--log-level', 'debug'], ['sleep', '3.5']),
      ).done;
      if (r.code !== 0) errors.push(`renew exit ${r.code}: ${r.stderr.slice(-200)}`);
      const d = await counter.delta(snap);
      const lines = logLines(r.stderr);
      renewals.push(lines.filter((l) => l.msg === 'lease renewed').length);
      for (const l of lines.filter((x) => typeof x.msg === 'string' && x.msg.startsWith('renewal failed')))
        renewFailures.push(l.err?.message ?? l.msg);
      res.renew.push(d);
    }
    // skip: a holder with the default TTL (next renewal in 30 s) runs until told to stop
    {
      const hjob = ctx.uid('stmt-holder');
      const stamp = path.join(ctx.tmp, `${hjob}.stamp`);
      const stop = path.join(ctx.tmp, `${hjob}.stop`);
      const holder = leasejob([
        'run',
        '--name',
        hjob,
        '--schema',
        ctx.schema,
        '--window',
        'h',
        '--',
        'sh',
        '-c',
        `${stampCmd(stamp)}; while [ ! -e '${stop}' ]; do sleep 0.02; done`,
      ]);
      await waitStamp(stamp, 'holder child');
      await sleep(100);
      const snap = await counter.snapshot();
      const r = await leasejob(['run', '--name', hjob, '--schema', ctx.schema, '--window', 'h', '--', 'true']).done;
      if (r.code !== 0) errors.push(`skip exit ${r.code}`);
      res.skip.push(await counter.delta(snap));
      writeFileSync(stop, '');
      await holder.done;
    }
  }

  const rep = ctx.report;
  const top = (d, kind) => d.top[kind] ?? 0;
  const total = (d) => Object.values(d.top).reduce((a, b) => a + b, 0);
  const method = ctx.pgss ? 'pg_stat_statements toplevel' : 'server log';
  rep.add({
    bench: 'statements',
    name: 'acquire + claim (run -- true)',
    unit: 'stmts',
    samples: res.plain.map((d) => top(d, 'acquire')),
    target: { text: '1', ok: res.plain.every((d) => top(d, 'acquire') === 1) },
  });
  rep.add({
    bench: 'statements',
    name: 'complete + release',
    unit: 'stmts',
    samples: res.plain.map((d) => top(d, 'finish')),
    target: { text: '1', ok: res.plain.every((d) => top(d, 'finish') === 1) },
  });
  rep.add({
    bench: 'statements',
    name: 'total per run without renewals',
    unit: 'stmts',
    samples: res.plain.map(total),
    target: { text: '<= 2', ok: res.plain.every((d) => total(d) <= 2) },
    note:
      `counted with ${method}; statements seen: ${describe(res.plain)}` +
      (ctx.pgss
        ? `; run inside our functions (toplevel=false) per run: ${res.plain.map((d) => d.nested).join(', ')}`
        : ''),
  });
  const perRenewal = res.renew.map((d, i) => (renewals[i] > 0 ? top(d, 'renew') / renewals[i] : NaN));
  rep.add({
    bench: 'statements',
    name: 'per renewal (TTL 3s, child 3.5s)',
    unit: 'stmts',
    samples: perRenewal,
    target: { text: '1', ok: perRenewal.every((x) => x === 1) },
    note: `renewals per run (runner debug log): ${renewals.join(', ')}; renew statements: ${res.renew.map((d) => top(d, 'renew')).join(', ')}; all statements: ${describe(res.renew)}`,
  });
  rep.add({
    bench: 'statements',
    name: 'renewing run besides renewals',
    unit: 'stmts',
    samples: res.renew.map((d) => total(d) - top(d, 'renew')),
    target: { text: '<= 2', ok: res.renew.every((d) => total(d) - top(d, 'renew') <= 2) },
  });
  rep.add({
    bench: 'statements',
    name: 'contender facing a live owner (skip)',
    unit: 'stmts',
    samples: res.skip.map(total),
    note: `statements: ${describe(res.skip)}`,
  });
  rep.add({
    bench: 'statements',
    name: 'late duplicate of a completed window',
    unit: 'stmts',
    samples: res.done.map(total),
    note: `statements: ${describe(res.done)}`,
  });
  if (renewFailures.length)
    rep.note(`statements: ${renewFailures.length} renewal(s) failed in the renewing runs, e.g. "${renewFailures[0]}"`);
  if (errors.length) rep.note(`statements: ${errors.length} unexpected exits: ${errors.slice(0, 3).join(' | ')}`);
  await counter.close();
}

function describe(deltas) {
  const agg = {};
  for (const d of deltas) for (const [k, v] of Object.entries(d.top)) agg[k] = (agg[k] ?? 0) + v;
  const others = new Set(deltas.flatMap((d) => d.otherQueries));
  return (
    Object.entries(agg)
      .map(([k, v]) => `${k} x${v / deltas.length}`)
      .join(', ') +
    (others.size
      ? ` (other: ${[...others]
          .slice(0, 3)
          .map((q) => q.slice(0, 80))
          .join(' | ')})`
      : '')
  );
}

/** pg_stat_statements snapshots (by queryid) for the runners' role. */
async function pgssCounter(ctx) {
  const oid = (await ctx.observer.query("SELECT oid FROM pg_roles WHERE rolname = 'postgres'")).rows[0].oid;
  const read = async () => {
    const { rows } = await ctx.observer.query(
      'SELECT queryid::text AS id, toplevel, query, calls::int AS calls FROM pg_stat_statements WHERE userid = $1 AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())',
      [oid],
    );
    return new Map(rows.map((r) => [`${r.id}/${r.toplevel}`, r]));
  };
  return {
    snapshot: read,
    async delta(before) {
      // Statistics are written at the end of each statement; the process has exited by now.
      const after = await read();
      const top = {};
      const otherQueries = [];
      let nested = 0;
      for (const [k, r] of after) {
        const calls = r.calls - (before.get(k)?.calls ?? 0);
        if (calls <= 0) continue;
        if (!r.toplevel) {
          nested += calls;
          continue;
        }
        const kind = kindOf(r.query);
        top[kind] = (top[kind] ?? 0) + calls;
        if (kind === 'other') otherQueries.push(r.query);
      }
      return { top, nested, otherQueries };
    },
    close: async () => {},
  };
}

/** log_statement=all, turned on for this bench only; lines from application 'leasejob'. */
async function logCounter(ctx) {
  await ctx.admin.query("ALTER SYSTEM SET log_statement = 'all'");
  await ctx.admin.query("ALTER SYSTEM SET log_line_prefix = '@@%a@@ '");
  await ctx.admin.query('SELECT pg_reload_conf()');
  await sleep(200);
  ctx.serverLog.enabled = true;
  ctx.report.note(
    'statements counted from the server log (log_statement=all): pg_stat_statements was not available or not chosen',
  );
  return {
    async snapshot() {
      await sleep(50);
      return ctx.serverLog.text.length;
    },
    async delta(offset) {
      await sleep(100); // let the server flush its stderr
      const text = ctx.serverLog.text.slice(offset);
      const top = {};
      const otherQueries = [];
      // "LOG:  statement: ..." or "LOG:  execute <unnamed>: ..." (extended protocol).
      for (const m of text.matchAll(/@@leasejob@@ LOG:\s+(?:statement|execute [^:]*):\s*(.*)/g)) {
        const kind = kindOf(m[1]);
        top[kind] = (top[kind] ?? 0) + 1;
        if (kind === 'other') otherQueries.push(m[1]);
      }
      return { top, nested: undefined, otherQueries };
    },
    async close() {
      ctx.serverLog.enabled = false;
      ctx.serverLog.text = '';
      await ctx.admin.query('ALTER SYSTEM RESET log_statement');
      await ctx.admin.query('ALTER SYSTEM RESET log_line_prefix');
      await ctx.admin.query('SELECT pg_reload_conf()');
    },
  };
}
