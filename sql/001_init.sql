-- 001: leases, windows, jobs registry, events with a per-job logical sequence, and the
-- functions `run` calls (one statement per step, so a run costs one round trip to acquire
-- and claim, one per renewal, one to finish and release; all pgbouncer-safe).
--
-- The migrator sets search_path to the target schema for this transaction; names below are
-- unqualified and every function pins its search_path to that schema (FROM CURRENT).

-- What each job is expected to do, recorded by every run, for absence checks.
-- last_seq is the counter row behind events.seq (never max(seq)+1).
CREATE TABLE jobs (
  name           text PRIMARY KEY,
  schedule       text,
  tz             text,
  window_mode    text,
  window_format  text,
  window_offset  text,
  ttl_ms         integer,
  max_delay_ms   bigint,
  alert_after_ms bigint,
  last_seq       bigint NOT NULL DEFAULT 0,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now()
);

-- One row per lease name, never deleted, so generations never restart.
CREATE TABLE leases (
  name              text PRIMARY KEY,
  owner             text NOT NULL,
  generation        bigint NOT NULL,
  acquired_at       timestamptz NOT NULL,
  renewed_at        timestamptz NOT NULL,
  expires_at        timestamptz NOT NULL,
  released_at       timestamptz,
  ttl_ms            integer NOT NULL,
  renew_interval_ms integer NOT NULL,
  window_key        text,
  -- The holder's database session: a contender that finds it gone knows the holder lost
  -- its connection (crashed) without waiting for a renewal to be overdue.
  backend_pid       integer,
  backend_start     timestamptz
);

-- The window ledger, keyed by the scheduled occurrence.
CREATE TABLE windows (
  job              text NOT NULL,
  window_key       text NOT NULL,
  scheduled_at     timestamptz,
  owner            text NOT NULL,
  generation       bigint NOT NULL,
  attempts         integer NOT NULL DEFAULT 1,
  first_started_at timestamptz NOT NULL DEFAULT now(),
  started_at       timestamptz NOT NULL DEFAULT now(),
  finished_at      timestamptz,
  completed_at     timestamptz,
  -- running | completed | failed | lost | missed
  outcome          text NOT NULL DEFAULT 'running',
  exit_code        integer,
  PRIMARY KEY (job, window_key)
);
CREATE INDEX windows_open ON windows (job) WHERE completed_at IS NULL;
CREATE INDEX windows_completed ON windows (job, completed_at DESC) WHERE completed_at IS NOT NULL;

-- Per-job event log in logical order; db_time and host_time are both kept, never used to order.
CREATE TABLE events (
  job        text NOT NULL,
  seq        bigint NOT NULL,
  kind       text NOT NULL,
  window_key text,
  owner      text,
  host       text,
  generation bigint,
  db_time    timestamptz NOT NULL DEFAULT now(),
  host_time  timestamptz,
  detail     jsonb NOT NULL DEFAULT '{}'::jsonb,
  PRIMARY KEY (job, seq)
);
CREATE INDEX events_kind ON events (kind, db_time);

-- Event counts by job, kind and host, kept by record_event so a scrape reads one small table
-- instead of counting a million events.
CREATE TABLE event_counts (
  job   text NOT NULL,
  kind  text NOT NULL,
  host  text NOT NULL,
  n     bigint NOT NULL DEFAULT 0,
  last_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job, kind, host)
);

-- Latest clock reading per host: database now() minus the host wall clock at the midpoint
-- of a round trip, +- half the round trip. Reported, never used to decide.
CREATE TABLE hosts (
  host           text PRIMARY KEY,
  offset_ms      integer NOT NULL,
  uncertainty_ms integer NOT NULL,
  measured_at    timestamptz NOT NULL DEFAULT now()
);

-- Append an event with the next sequence number of its job, in the caller's transaction.
CREATE FUNCTION record_event(
  p_job text, p_kind text, p_window text, p_owner text, p_generation bigint,
  p_host_time timestamptz, p_detail jsonb
) RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_seq bigint;
  v_host text := coalesce(nullif(split_part(p_owner, ':', 1), ''), 'unknown');
BEGIN
  INSERT INTO jobs AS j (name, last_seq) VALUES (p_job, 1)
  ON CONFLICT (name) DO UPDATE SET last_seq = j.last_seq + 1
  RETURNING last_seq INTO v_seq;
  INSERT INTO events (job, seq, kind, window_key, owner, host, generation, host_time, detail)
  VALUES (p_job, v_seq, p_kind, p_window, p_owner, v_host, p_generation,
          p_host_time, coalesce(p_detail, '{}'::jsonb));
  INSERT INTO event_counts AS c (job, kind, host, n) VALUES (p_job, p_kind, v_host, 1)
  ON CONFLICT (job, kind, host) DO UPDATE SET n = c.n + 1, last_at = now();
  RETURN v_seq;
END $$;

-- Record what the job is expected to do (registry for absence checks). Only written when it
-- changed: an upsert would lock the job's row even when it updates nothing, and a herd of
-- contenders would queue on it.
CREATE FUNCTION register_job(p_job text, p_ttl_ms integer, p_spec jsonb) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  IF p_spec IS NOT NULL AND NOT EXISTS (
       SELECT 1 FROM jobs j WHERE j.name = p_job
          AND (j.schedule, j.tz, j.window_mode, j.window_format, j.window_offset, j.ttl_ms,
               j.max_delay_ms, j.alert_after_ms)
              IS NOT DISTINCT FROM
              (p_spec->>'schedule', p_spec->>'tz', p_spec->>'window_mode', p_spec->>'window_format',
               p_spec->>'window_offset', p_ttl_ms, (p_spec->>'max_delay_ms')::bigint,
               (p_spec->>'alert_after_ms')::bigint)) THEN
    INSERT INTO jobs AS j (name, schedule, tz, window_mode, window_format, window_offset,
                           ttl_ms, max_delay_ms, alert_after_ms)
    VALUES (p_job, p_spec->>'schedule', p_spec->>'tz', p_spec->>'window_mode',
            p_spec->>'window_format', p_spec->>'window_offset', p_ttl_ms,
            (p_spec->>'max_delay_ms')::bigint, (p_spec->>'alert_after_ms')::bigint)
    ON CONFLICT (name) DO UPDATE SET
      schedule = EXCLUDED.schedule, tz = EXCLUDED.tz, window_mode = EXCLUDED.window_mode,
      window_format = EXCLUDED.window_format, window_offset = EXCLUDED.window_offset,
      ttl_ms = EXCLUDED.ttl_ms, max_delay_ms = EXCLUDED.max_delay_ms,
      alert_after_ms = EXCLUDED.alert_after_ms, updated_at = now();
  END IF;
END $$;

-- Acquire the lease and claim the window in one round trip.
-- outcome: acquired | busy (live holder) | stale (holder stopped renewing or lost its session:
-- wait until expires_at and try again) | done (window already completed) | missed (occurrence
-- older than max delay).
CREATE FUNCTION acquire(
  p_job text, p_owner text, p_ttl_ms integer, p_renew_ms integer,
  p_window text, p_scheduled_at timestamptz, p_rerun boolean, p_max_delay_ms bigint,
  p_host_time timestamptz, p_spec jsonb, p_lock_timeout_ms integer
) RETURNS TABLE (
  outcome text, generation bigint, attempt integer, db_now timestamptz,
  holder text, holder_generation bigint, holder_window text, expires_at timestamptz,
  completed_at timestamptz
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_prev leases%ROWTYPE;
  v_gen bigint;
  v_attempt integer;
  v_done timestamptz;
  v_stale boolean;
  v_session_gone boolean;
BEGIN
  db_now := now();

  -- Lock order: the lease row first (finish() too, whoever holds it), so acquire and finish
  -- of one job serialize there; the job's row (registry, event counter) before the window's
  -- where no lease is taken (the missed path).

  -- A completed window is final (completed_at is only ever set by a lease holder), so a
  -- late duplicate leaves without touching the lease.
  IF p_window IS NOT NULL AND NOT p_rerun THEN
    SELECT w.completed_at INTO v_done FROM windows w WHERE w.job = p_job AND w.window_key = p_window;
    IF v_done IS NOT NULL THEN
      PERFORM register_job(p_job, p_ttl_ms, p_spec);
      outcome := 'done'; completed_at := v_done;
      RETURN NEXT; RETURN;
    END IF;
  END IF;

  IF p_window IS NOT NULL AND p_max_delay_ms IS NOT NULL AND p_scheduled_at IS NOT NULL
     AND now() - p_scheduled_at > make_interval(secs => p_max_delay_ms / 1000.0) THEN
    -- The job's row before the window's, as everywhere.
    PERFORM register_job(p_job, p_ttl_ms, p_spec);
    PERFORM record_event(p_job, 'window-missed', p_window, p_owner, NULL, p_host_time,
      jsonb_build_object('scheduled_at', p_scheduled_at, 'max_delay_ms', p_max_delay_ms));
    INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, attempts, outcome, finished_at)
    VALUES (p_job, p_window, p_scheduled_at, p_owner, 0, 0, 'missed', now())
    ON CONFLICT (job, window_key) DO NOTHING;
    outcome := 'missed';
    RETURN NEXT; RETURN;
  END IF;

  SELECT * INTO v_prev FROM leases l WHERE l.name = p_job;

  -- A lease that is plainly live is busy: answer from this read, without queueing for the
  -- row lock behind every other contender (the upsert below would lock it to find out).
  IF v_prev.expires_at > now() THEN
    v_gen := NULL;
  ELSE
  -- The upsert locks the row even when its WHERE fails, so it waits behind an open fenced
  -- transaction (FOR SHARE). Bounded: a row locked that long means an owner is working (or
  -- paused mid-transaction); we answer from a plain read below instead of hanging.
  PERFORM set_config('lock_timeout', greatest(p_lock_timeout_ms, 1) || 'ms', true);
  BEGIN
  INSERT INTO leases AS l (name, owner, generation, acquired_at, renewed_at, expires_at,
                           released_at, ttl_ms, renew_interval_ms, window_key, backend_pid, backend_start)
  VALUES (p_job, p_owner, 1, now(), now(), now() + make_interval(secs => p_ttl_ms / 1000.0),
          NULL, p_ttl_ms, p_renew_ms, p_window, pg_backend_pid(),
          (SELECT a.backend_start FROM pg_stat_activity a WHERE a.pid = pg_backend_pid()))
  ON CONFLICT (name) DO UPDATE SET
    owner = EXCLUDED.owner, generation = l.generation + 1, acquired_at = now(),
    renewed_at = now(), expires_at = EXCLUDED.expires_at, released_at = NULL,
    ttl_ms = EXCLUDED.ttl_ms, renew_interval_ms = EXCLUDED.renew_interval_ms,
    window_key = EXCLUDED.window_key, backend_pid = EXCLUDED.backend_pid,
    backend_start = EXCLUDED.backend_start
  WHERE l.expires_at <= now()
  RETURNING l.generation INTO v_gen;
  EXCEPTION WHEN lock_not_available THEN
    v_gen := NULL;
  END;
  PERFORM set_config('lock_timeout', '0', true);
  END IF;

  PERFORM register_job(p_job, p_ttl_ms, p_spec);

  IF v_gen IS NULL THEN
    -- Busy: describe the holder so the caller can skip, wait, or wait out a stale holder.
    SELECT * INTO v_prev FROM leases l WHERE l.name = p_job;
    holder := v_prev.owner; holder_generation := v_prev.generation;
    holder_window := v_prev.window_key; expires_at := v_prev.expires_at;
    -- Slack of half an interval absorbs a slow renewal round trip.
    v_stale := now() > v_prev.renewed_at + make_interval(secs => v_prev.renew_interval_ms * 1.5 / 1000.0);
    v_session_gone := v_prev.backend_pid IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM pg_stat_activity a
       WHERE a.pid = v_prev.backend_pid
         -- backend_start is NULL for another role's session without pg_read_all_stats.
         AND (a.backend_start IS NULL OR a.backend_start = v_prev.backend_start));
    outcome := CASE WHEN v_stale OR v_session_gone THEN 'stale' ELSE 'busy' END;
    RETURN NEXT; RETURN;
  END IF;

  generation := v_gen;
  PERFORM record_event(p_job,
    CASE WHEN v_prev.name IS NOT NULL AND v_prev.released_at IS NULL THEN 'stale-takeover' ELSE 'acquired' END,
    p_window, p_owner, v_gen, p_host_time,
    CASE WHEN v_prev.name IS NOT NULL AND v_prev.released_at IS NULL
         THEN jsonb_build_object('previous_owner', v_prev.owner, 'previous_generation', v_prev.generation,
                                 'previous_expired_at', v_prev.expires_at)
         ELSE '{}'::jsonb END);

  IF p_window IS NOT NULL THEN
    INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation)
    VALUES (p_job, p_window, p_scheduled_at, p_owner, v_gen)
    ON CONFLICT (job, window_key) DO UPDATE SET
      owner = EXCLUDED.owner, generation = EXCLUDED.generation,
      attempts = w.attempts + 1, started_at = now(), finished_at = NULL,
      completed_at = NULL, outcome = 'running', exit_code = NULL,
      scheduled_at = coalesce(w.scheduled_at, EXCLUDED.scheduled_at)
    WHERE w.completed_at IS NULL OR p_rerun
    RETURNING w.attempts INTO v_attempt;

    IF v_attempt IS NULL THEN
      -- Completed between our check and the lease (cannot happen while completion needs the
      -- lease, kept as a guard): give the lease back.
      UPDATE leases l SET expires_at = now(), released_at = now() WHERE l.name = p_job;
      outcome := 'done'; generation := NULL;
      RETURN NEXT; RETURN;
    END IF;
    attempt := v_attempt;
    PERFORM record_event(p_job, 'window-claimed', p_window, p_owner, v_gen, p_host_time,
      jsonb_build_object('attempt', v_attempt, 'scheduled_at', p_scheduled_at, 'rerun', p_rerun));
  ELSE
    attempt := 1;
  END IF;

  outcome := 'acquired';
  RETURN NEXT;
END $$;

-- Renew: only the current owner, same generation, before expiry. Returns no row when the
-- lease is gone. The lock timeout keeps a long fenced transaction (FOR SHARE on this row)
-- from hanging the renewal silently: it fails with 55P03 and the runner logs it.
CREATE FUNCTION renew(
  p_job text, p_owner text, p_generation bigint, p_ttl_ms integer, p_lock_timeout_ms integer
) RETURNS TABLE (db_now timestamptz, expires_at timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
  RETURN QUERY
  UPDATE leases l
     SET expires_at = now() + make_interval(secs => p_ttl_ms / 1000.0),
         renewed_at = now(),
         backend_pid = pg_backend_pid(),
         backend_start = (SELECT a.backend_start FROM pg_stat_activity a WHERE a.pid = pg_backend_pid())
   WHERE l.name = p_job AND l.owner = p_owner AND l.generation = p_generation AND l.expires_at > now()
  RETURNING now(), l.expires_at;
END $$;

-- Finish a run: record the window's outcome if this generation still holds the lease, then
-- release (expire, never delete). p_outcome: completed | failed | lost | none (no window).
-- Returns held=false when the lease was no longer ours (nothing recorded but the event).
CREATE FUNCTION finish(
  p_job text, p_owner text, p_generation bigint, p_window text, p_outcome text,
  p_exit_code integer, p_host_time timestamptz, p_detail jsonb
) RETURNS TABLE (held boolean, db_now timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_lease leases%ROWTYPE;
BEGIN
  db_now := now();
  -- Lock the lease row whoever holds it, first, as acquire() does: a finish that lost its
  -- lease and the new owner's acquire then serialize here instead of deadlocking later on
  -- the window and job rows.
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  held := FOUND AND v_lease.owner = p_owner AND v_lease.generation = p_generation AND v_lease.expires_at > now();

  IF held AND p_window IS NOT NULL AND p_outcome IN ('completed', 'failed') THEN
    UPDATE windows w SET
      outcome = p_outcome, exit_code = p_exit_code, finished_at = now(),
      completed_at = CASE WHEN p_outcome = 'completed' THEN now() ELSE NULL END
     WHERE w.job = p_job AND w.window_key = p_window AND w.generation = p_generation;
    PERFORM record_event(p_job, 'window-' || p_outcome, p_window, p_owner, p_generation,
      p_host_time, jsonb_strip_nulls(jsonb_build_object('exit_code', p_exit_code, 'attempt', p_detail->'attempt',
        'duration_ms', p_detail->'duration_ms', 'aborted', p_detail->'aborted')));
  END IF;

  IF p_detail ? 'offset_ms' THEN
    INSERT INTO hosts AS h (host, offset_ms, uncertainty_ms)
    VALUES (coalesce(nullif(split_part(p_owner, ':', 1), ''), 'unknown'),
            (p_detail->>'offset_ms')::integer, (p_detail->>'uncertainty_ms')::integer)
    ON CONFLICT (host) DO UPDATE SET offset_ms = EXCLUDED.offset_ms,
      uncertainty_ms = EXCLUDED.uncertainty_ms, measured_at = now();
    IF (p_detail->>'offset_large')::boolean THEN
      PERFORM record_event(p_job, 'clock-offset', p_window, p_owner, p_generation, p_host_time,
        jsonb_build_object('offset_ms', p_detail->'offset_ms', 'uncertainty_ms', p_detail->'uncertainty_ms'));
    END IF;
  END IF;

  IF held THEN
    UPDATE leases l SET expires_at = now(), released_at = now()
     WHERE l.name = p_job AND l.generation = p_generation;
    PERFORM record_event(p_job, 'released', p_window, p_owner, p_generation, p_host_time,
      jsonb_strip_nulls(jsonb_build_object('offset_ms', p_detail->'offset_ms', 'uncertainty_ms', p_detail->'uncertainty_ms')));
  ELSE
    -- Lost before we could finish: the window stays open for whoever holds the lease now.
    UPDATE windows w SET outcome = 'lost', finished_at = now()
     WHERE w.job = p_job AND w.window_key = p_window AND w.generation = p_generation
       AND w.completed_at IS NULL;
    PERFORM record_event(p_job, 'lease-lost', p_window, p_owner, p_generation, p_host_time,
      jsonb_strip_nulls(jsonb_build_object('outcome', p_outcome, 'aborted', p_detail->'aborted')));
  END IF;
  RETURN NEXT;
END $$;
