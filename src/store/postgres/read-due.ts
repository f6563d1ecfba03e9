// The monitor's read of due occurrences not completed, answered from each job's digest where it can.
import { type DueGroup, type DueNotCompleted, NOT_COMPLETED_LISTED, expectedFrom } from '../contract.js';
import { budgetOutcome } from './attempt-budget.js';
import { type Pg, epochMs } from './context.js';

export async function readDueNotCompleted(db: Pg, groups: DueGroup[], name?: string): Promise<DueNotCompleted[]> {
  if (groups.length === 0) return [];
  // Each job's digest (window_digest, migration 019) answers first: a job whose due windows
  // are all among its final ones sends no row and costs no probe of the ledger. Otherwise,
  // when its due windows are all later than the digest's floor (every final window scheduled
  // since is in it, and every marked one unless there were too many), the digest says which
  // are final, and the rows that are not come from windows_open (open windows only, a small
  // index). Only a job without a digest, with a due window at or before its floor, or with
  // marks_full, is read from the ledger as before: one index scan per job
  // (windows_pkey, `window_key = ANY(its key's due windows)`). The history kept then no
  // longer enters a read of healthy jobs (issue 24; docs/performance.md). Which due windows
  // are missing, and the oldest NOT_COMPLETED_LISTED, are worked out here from the key's list
  // (a row per job and due window through the executor cost more than the probes). The keys
  // are few and come from the jobs table, so NULL can stand as '' (never a valid value).
  const d = groups.flatMap((g, i) => g.windows.map((w) => ({ grp: i + 1, ...w })));
  const { rows } = await db.query(
    `WITH g AS (
       SELECT * FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[])
              WITH ORDINALITY AS g(schedule, tz, fmt, off, alert, lookback, grp)),
     k AS (
       SELECT d.grp, array_agg(d.window_key) AS due, min(d.at_ms) AS oldest_ms,
              array_agg(d.window_key) || coalesce(array_agg(d.legacy_key) FILTER (WHERE d.legacy_key IS NOT NULL), '{}') AS probe
         FROM unnest($1::int[], $2::text[], $9::text[], $11::float8[]) AS d(grp, window_key, legacy_key, at_ms) GROUP BY d.grp),
     jg AS MATERIALIZED (
       SELECT j.name, ${epochMs('j.created_at')} AS created_ms, ${epochMs('j.schedule_since')} AS since_ms,
              (SELECT ${epochMs('t.retained_from')} FROM ${db.s}.retention t WHERE t.job = j.name) AS retained_ms,
              g.grp FROM ${db.s}.jobs j JOIN g ON j.schedule = g.schedule
          AND coalesce(j.tz, '') = coalesce(g.tz, '') AND coalesce(j.window_format, '') = coalesce(g.fmt, '')
          AND coalesce(j.window_offset, '') = coalesce(g.off, '') AND coalesce(j.alert_after_ms, -1) = coalesce(g.alert, -1)
          AND coalesce(j.alert_lookback_ms, -1) = coalesce(g.lookback, -1)
        WHERE j.window_mode = 'schedule' AND ($10::text IS NULL OR j.name = $10))
     SELECT jg.name AS job, jg.grp, jg.created_ms, jg.since_ms, jg.retained_ms,
            CASE WHEN f.probed THEN f.final ELSE ARRAY(SELECT x FROM unnest(k.probe) x WHERE dg.finals ? x OR dg.marks ? x) END AS final,
            coalesce(f.open_keys, o.open_keys) AS open_keys, coalesce(f.open_outcomes, o.open_outcomes) AS open_outcomes,
            coalesce(f.open_generations, o.open_generations) AS open_generations
       FROM jg JOIN k ON k.grp = jg.grp
       LEFT JOIN ${db.s}.window_digest dg ON dg.job = jg.name
       CROSS JOIN LATERAL (
         SELECT dg.job IS NULL OR dg.floor_ms >= k.oldest_ms OR dg.marks_full AS probed,
                count(*) FILTER (WHERE w.completed_at IS NOT NULL AND w.window_key = ANY(k.due)) AS due_final,
                array_agg(w.window_key) FILTER (WHERE w.completed_at IS NOT NULL) AS final,
                array_agg(w.window_key) FILTER (WHERE w.completed_at IS NULL AND w.window_key = ANY(k.due)) AS open_keys,
                array_agg(${budgetOutcome('w')}) FILTER (WHERE w.completed_at IS NULL AND w.window_key = ANY(k.due)) AS open_outcomes,
                array_agg(w.generation::text) FILTER (WHERE w.completed_at IS NULL AND w.window_key = ANY(k.due)) AS open_generations
           FROM ${db.s}.windows w
          WHERE (dg.job IS NULL OR dg.floor_ms >= k.oldest_ms OR dg.marks_full) AND w.job = jg.name AND w.window_key = ANY(k.probe)) f
       CROSS JOIN LATERAL (
         SELECT array_agg(w.window_key) AS open_keys, array_agg(${budgetOutcome('w')}) AS open_outcomes,
                array_agg(w.generation::text) AS open_generations
           FROM ${db.s}.windows w
          WHERE dg.job IS NOT NULL AND dg.floor_ms < k.oldest_ms AND NOT dg.marks_full
            AND w.job = jg.name AND w.completed_at IS NULL AND w.window_key = ANY(k.due)) o
      WHERE NOT coalesce(dg.finals ?& k.due, false)
        AND (NOT f.probed OR f.due_final < cardinality(k.due))`,
    [
      d.map((x) => x.grp),
      d.map((x) => x.window),
      groups.map((g) => g.schedule),
      groups.map((g) => g.tz),
      groups.map((g) => g.windowFormat),
      groups.map((g) => g.windowOffset),
      groups.map((g) => g.alertAfterMs),
      groups.map((g) => g.alertLookbackMs),
      d.map((x) => x.legacy ?? null),
      name ?? null,
      d.map((x) => x.scheduledAt.getTime()),
    ],
  );
  const out: DueNotCompleted[] = [];
  for (const r of rows) {
    const g = groups[(r.grp as number) - 1]!;
    const final = new Set<string>(r.final ?? []);
    const open = new Map<string, { outcome: string; generation: string }>();
    const keys = (r.open_keys ?? []) as string[];
    for (let i = 0; i < keys.length; i++)
      open.set(keys[i]!, { outcome: r.open_outcomes[i], generation: r.open_generations[i] });
    const mine: DueNotCompleted[] = [];
    let count = 0;
    // As before in SQL, and as the embedded store: a due window is not final when it has no
    // final row (nor its legacy spelling); one without a row is expected only of a job
    // registered by then, and not before its retention horizon (pruned: expectedFrom); the
    // oldest few are listed, and the key's latest window.
    g.windows.forEach((w, i) => {
      if (final.has(w.window) || (w.legacy !== undefined && final.has(w.legacy))) return;
      const row = open.get(w.window);
      if (row === undefined && expectedFrom(r.created_ms, r.retained_ms, r.since_ms) > w.scheduledAt.getTime()) return;
      count++;
      if (count <= NOT_COMPLETED_LISTED || i === g.windows.length - 1)
        mine.push({
          job: r.job,
          count: 0,
          window: w.window,
          outcome: row?.outcome ?? null,
          generation: row?.generation ?? null,
        });
    });
    for (const m of mine) m.count = count;
    for (const m of mine) out.push(m);
  }
  return out;
}
