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
  // Ten windows per job, the last one open for every 7th job.
  await pool.query(
    `INSERT INTO ${s}.windows (job, window_key, scheduled_at, owner, generation, attempts, started_at, finished_at, completed_at, outcome)
     SELECT 'job-' || i, 'w' || k, now() - k * interval '1 hour', 'h:1:x', 1, 1 + (k % 2), now() - k * interval '1 hour',
            now() - k * interval '1 hour' + interval '5 seconds',
            CASE WHEN k = 0 AND i % 7 = 0 THEN NULL ELSE now() - k * interval '1 hour' + interval '5 seconds' END,
            CASE WHEN k = 0 AND i % 7 = 0 THEN 'failed' ELSE 'completed' END
       FROM generate_series(1, $1::int) i, generate_series(0, 9) k`,
    [jobs],
  );
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
  await pool.query(`INSERT INTO ${s}.hosts (host, offset_ms, uncertainty_ms) SELECT 'host' || h, h, 1 FROM generate_series(0, 19) h`);
  await pool.query(`ANALYZE ${s}.jobs; ANALYZE ${s}.leases; ANALYZE ${s}.windows; ANALYZE ${s}.events; ANALYZE ${s}.event_counts`);
}
