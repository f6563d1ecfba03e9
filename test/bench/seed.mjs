// Seed a schema with N registered jobs and M events (set-based SQL), for scrape/status benchmarks.
export async function seedJobs(pool, schema, { jobs = 10_000, events = 1_000_000 } = {}) {
  const s = `"${schema}"`;
  const schedules = ['* * * * *', '*/5 * * * *', '0 * * * *', '5 0 * * *', '30 2 * * 1'];
  await pool.query(
    `INSERT INTO ${s}.jobs (name, schedule, tz, window_mode, alert_after_ms, ttl_ms, created_at, last_seq)
     SELECT 'job-' || i, ($2::text[])[1 + i % 5], CASE WHEN i % 2 = 0 THEN 'UTC' ELSE 'America/Sao_Paulo' END, 'schedule',
            NULL, 90000, now() - interval '30 days', 0
       FROM generate_series(1, $1::int) i`,
    [jobs, schedules],
  );
  await pool.query(
    `INSERT INTO ${s}.leases (name, owner, generation, acquired_at, renewed_at, expires_at, released_at, ttl_ms, renew_interval_ms)
     SELECT 'job-' || i, 'host' || (i % 20) || ':1:x', 100 + i % 7, now() - interval '1 minute', now(),
            CASE WHEN i % 10 = 0 THEN now() + interval '60 seconds' ELSE now() - interval '1 second' END,
            CASE WHEN i % 10 = 0 THEN NULL ELSE now() END, 90000, 30000
       FROM generate_series(1, $1::int) i`,
    [jobs],
  );
  // Ten windows per job, the last one open for every 7th job. Loaded with the digest's triggers
  // off and the digest then rebuilt from the ledger in one pass (as after a restore).
  await pool.query(`ALTER TABLE ${s}.windows DISABLE TRIGGER USER`);
  await pool.query(
    `INSERT INTO ${s}.windows (job, window_key, scheduled_at, owner, generation, attempts, started_at, finished_at, completed_at, outcome)
     SELECT 'job-' || i, 'w' || k, now() - k * interval '1 hour', 'h:1:x', 1, 1 + (k % 2), now() - k * interval '1 hour',
            now() - k * interval '1 hour' + interval '5 seconds',
            CASE WHEN k = 0 AND i % 7 = 0 THEN NULL ELSE now() - k * interval '1 hour' + interval '5 seconds' END,
            CASE WHEN k = 0 AND i % 7 = 0 THEN 'failed' ELSE 'completed' END
       FROM generate_series(1, $1::int) i, generate_series(0, 9) k`,
    [jobs],
  );
  await pool.query(`ALTER TABLE ${s}.windows ENABLE TRIGGER USER`);
  await pool.query(`SELECT ${s}.rebuild_window_digest()`);
  const perJob = Math.max(1, Math.floor(events / jobs));
  await pool.query(
    `INSERT INTO ${s}.events (job, seq, kind, window_key, owner, host, generation, db_time, host_time, detail)
     SELECT 'job-' || i, q, (ARRAY['acquired','window-claimed','window-completed','released','busy-skip'])[1 + q % 5],
            'w' || (q % 10), 'host' || (i % 20) || ':1:x', 'host' || (i % 20), 1, now() - q * interval '1 minute', now(), '{}'::jsonb
       FROM generate_series(1, $1::int) i, generate_series(1, $2::int) q`,
    [jobs, perJob],
  );
  await pool.query(`UPDATE ${s}.jobs SET last_seq = $1`, [perJob]);
  await pool.query(
    `INSERT INTO ${s}.event_counts (job, kind, host, n)
     SELECT job, kind, host, count(*) FROM ${s}.events GROUP BY job, kind, host`,
  );
  await pool.query(
    `INSERT INTO ${s}.hosts (host, offset_ms, uncertainty_ms) SELECT 'host' || h, h, 1 FROM generate_series(0, 19) h`,
  );
  await pool.query(
    `ANALYZE ${s}.jobs; ANALYZE ${s}.leases; ANALYZE ${s}.windows; ANALYZE ${s}.events; ANALYZE ${s}.event_counts; ANALYZE ${s}.window_digest`,
  );
}

/**
 * A long history for the scale bench: `jobs` every-minute jobs (registry, a released lease each),
 * `windows` completed windows and `events` events spread evenly over the last `days` days, in
 * seq order with time, plus the event counters. Set-based SQL, one statement per table.
 * `jobs` with no `windows` or `events`: the same registry with no history (the baseline).
 */
export async function seedHistory(
  pool,
  schema,
  { jobs = 10_000, events = 10_000_000, windows = 2_000_000, days = 200 } = {},
) {
  const s = `"${schema}"`;
  const perJobWindows = Math.max(1, Math.floor(windows / jobs));
  const perJobEvents = Math.max(5, Math.floor(events / jobs));
  await pool.query(
    `INSERT INTO ${s}.jobs (name, schedule, tz, window_mode, ttl_ms, created_at, last_seq)
     SELECT 'job-' || i, '* * * * *', 'UTC', 'schedule', 90000, now() - $2 * interval '1 day', $3
       FROM generate_series(1, $1::int) i`,
    [jobs, days, perJobEvents],
  );
  await pool.query(
    `INSERT INTO ${s}.leases (name, owner, generation, acquired_at, renewed_at, expires_at, released_at, ttl_ms, renew_interval_ms)
     SELECT 'job-' || i, 'host' || (i % 20) || ':1:x', $2, now() - interval '1 minute', now() - interval '1 minute', now() - interval '50 seconds', now() - interval '50 seconds', 90000, 30000
       FROM generate_series(1, $1::int) i`,
    [jobs, perJobWindows],
  );
  // Window k of a job: k steps of `days / perJob` back; the newest (k = 0) a minute ago. Loaded
  // with the digest's triggers off, then the digest rebuilt in one pass (window_digest, 019).
  await pool.query(`ALTER TABLE ${s}.windows DISABLE TRIGGER USER`);
  await pool.query(
    `INSERT INTO ${s}.windows (job, window_key, scheduled_at, owner, generation, attempts, first_started_at, started_at, finished_at, completed_at, outcome)
     SELECT 'job-' || i, to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), t, 'host:1:x', $2 - k, 1, t, t, t + interval '1 second', t + interval '1 second', 'completed'
       FROM generate_series(1, $1::int) i, generate_series(0, $2::int - 1) k,
            LATERAL (SELECT date_trunc('minute', now()) - interval '1 minute' - k * ($3 * interval '1 day' / $2)) AS w(t)`,
    [jobs, perJobWindows, days],
  );
  await pool.query(`ALTER TABLE ${s}.windows ENABLE TRIGGER USER`);
  await pool.query(`SELECT ${s}.rebuild_window_digest()`);
  await pool.query(
    `INSERT INTO ${s}.events (job, seq, kind, window_key, owner, host, generation, db_time, host_time, detail)
     SELECT 'job-' || i, q, (ARRAY['acquired','window-claimed','window-completed','released','busy-skip'])[1 + q % 5], NULL,
            'host' || (i % 20) || ':1:x', 'host' || (i % 20), 1, t, t, '{}'::jsonb
       FROM generate_series(1, $1::int) i, generate_series(1, $2::int) q,
            LATERAL (SELECT now() - interval '2 minutes' - ($2 - q) * ($3 * interval '1 day' / $2)) AS e(t)`,
    [jobs, perJobEvents, days],
  );
  await pool.query(
    `INSERT INTO ${s}.event_counts (job, kind, host, n)
     SELECT 'job-' || i, k, 'host' || (i % 20), $2 / 5 FROM generate_series(1, $1::int) i, unnest(ARRAY['acquired','window-claimed','window-completed','released','busy-skip']) k`,
    [jobs, perJobEvents],
  );
  await pool.query(
    `VACUUM ANALYZE ${s}.jobs, ${s}.leases, ${s}.windows, ${s}.events, ${s}.event_counts, ${s}.window_digest`,
  );
  return { jobs, windows: perJobWindows * jobs, events: perJobEvents * jobs };
}
