-- 021: tokens that survive lost history (issue 14). Two holes let one token go to two owners:
-- - synchronous_commit = off (server, database or role) and a crash restart in place: an
--   acquisition the runner was told about was lost with the unflushed WAL, and the next owner
--   was given the same token. durable_commit(): every function that takes, uses or gives back a
--   lease, claims or finishes a window, or pauses, resumes or marks, commits with at least
--   synchronous_commit = local.
-- - A physical backup (or disk snapshot) started in place of the lost primary: same system
--   identifier and timeline, so the fence epoch stays, and the generation is back where the
--   backup left it. fence_epoch() now records the server's start (pg_postmaster_start_time());
--   on the first acquisition after a new start it raises the token floor to the database clock
--   in milliseconds since 2025 (clock_token_floor()), and acquire() issues no token below it:
--   a hybrid logical clock, stepped once per server start, so tokens stay small counters until
--   the first restart. It assumes the new server's clock is not behind the clock the lost
--   tokens were issued by (docs/fencing.md).
-- - finish_window(): a retry is recognised by its exit code too (or, without one, its own
--   window-<outcome> event), so that a holder whose window was marked by hand meanwhile is told
--   it lost the lease, not that it still holds it (020's part, here with its final definition).
-- mark_window() is left as 023 defines it (its commit is made durable by the caller: the
-- operator commands call durable_commit() in the same statement).
-- fence_epoch gains started_at and token_floor (a row from before 021 records its start on
-- first use, without a floor).
-- Functions: acquire, claim_window, clock_token_floor, durable_commit, fence_epoch, finish, finish_window, pause_job, record_missed, release_lease, renew, resume_job, each its whole current definition from sql/functions/.
-- CREATE OR REPLACE keeps the privileges granted on a function of the same signature;
-- SECURITY DEFINER and the pinned search_path are restated, as CREATE OR REPLACE resets them.

ALTER TABLE fence_epoch ADD COLUMN IF NOT EXISTS started_at timestamptz;
ALTER TABLE fence_epoch ADD COLUMN IF NOT EXISTS token_floor bigint NOT NULL DEFAULT 0;

-- acquire: as in sql/functions/acquire.sql
CREATE OR REPLACE FUNCTION acquire(
  p_job text, p_owner text, p_ttl_ms integer, p_renew_ms integer,
  p_window text, p_scheduled_at timestamptz, p_rerun boolean, p_max_delay_ms bigint,
  p_host_time timestamptz, p_spec jsonb, p_lock_timeout_ms integer
) RETURNS TABLE (
  outcome text, generation bigint, attempt integer, db_now timestamptz,
  holder text, holder_generation bigint, holder_window text, expires_at timestamptz,
  completed_at timestamptz
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_prev leases%ROWTYPE;
  v_gen bigint;
  v_attempt integer;
  v_stale boolean;
  v_session_gone boolean;
  v_epoch bigint; -- 011
  v_gate record; -- 020
  v_floor bigint; -- 021
BEGIN
  db_now := now();
  -- 021: durable before the child starts, whatever synchronous_commit says.
  PERFORM durable_commit();

  -- Lock order: the lease row first (finish() too, whoever holds it), so acquire and finish
  -- of one job serialize there; the job's row (registry, event counter) before the window's
  -- where no lease is taken (the missed path).

  -- 020: the gate (window_gate): a completed window is final, so a late duplicate leaves
  -- without touching the lease; one scheduled before the retention horizon is missed (014); a
  -- paused job takes no lease and its occurrence is skipped (012); past --max-delay, missed.
  -- Read here without locks, and again under the lease row lock before a lease is taken.
  SELECT * INTO v_gate FROM window_gate(p_job, p_window, p_scheduled_at, p_rerun, p_max_delay_ms, false);
  IF v_gate.reason IS NOT NULL THEN
    -- The job's row before the window's, as everywhere.
    PERFORM register_job(p_job, p_ttl_ms, p_spec);
    outcome := window_refused(p_job, p_owner, NULL, p_window, p_scheduled_at, v_gate.reason, v_gate.retained_from,
                              p_max_delay_ms, p_host_time);
    completed_at := v_gate.completed_at;
    RETURN NEXT; RETURN;
  END IF;

  SELECT * INTO v_prev FROM leases l WHERE l.name = p_job;

  -- A lease that is plainly live is busy: answer from this read, without queueing for the
  -- row lock behind every other contender (the upsert below would lock it to find out).
  IF v_prev.expires_at > now() THEN
    v_gen := NULL;
  ELSE
  -- 011: the fence epoch of this server's history, advanced first if the server was promoted,
  -- restored or replaced since it was last read; the generation issued below is in it.
  v_epoch := fence_epoch();
  -- 021: the token floor of this server start (fence_epoch()): after a loss of history in
  -- place, the next token is above every token issued before it.
  SELECT v_epoch * 1000000000000 + f.token_floor INTO v_floor FROM fence_epoch f;
  -- The upsert locks the row even when its WHERE fails, so it waits behind an open fenced
  -- transaction (FOR SHARE). Bounded: a row locked that long means an owner is working (or
  -- paused mid-transaction); we answer from a plain read below instead of hanging.
  PERFORM set_config('lock_timeout', greatest(p_lock_timeout_ms, 1) || 'ms', true);
  BEGIN
  -- 007: the row as it is once ours to change. The plain read above may predate a finish
  -- that committed while we queued for the lock: that owner released it, it did not lose it.
  SELECT * INTO v_prev FROM leases l WHERE l.name = p_job FOR UPDATE;
  -- Such a finish may have completed our very window (completion needs the lease row lock,
  -- which we now hold), and a pause may have committed while we queued: the gate again, the
  -- pause now under the job's row lock (020), before any generation is spent.
  SELECT * INTO v_gate FROM window_gate(p_job, p_window, p_scheduled_at, p_rerun, p_max_delay_ms, true);
  IF v_gate.reason IS NULL THEN
  INSERT INTO leases AS l (name, owner, generation, acquired_at, renewed_at, expires_at,
                           released_at, ttl_ms, renew_interval_ms, window_key, backend_pid, backend_start)
  VALUES (p_job, p_owner, greatest(next_token(NULL, v_epoch), v_floor), now(), now(), now() + make_interval(secs => p_ttl_ms / 1000.0),
          NULL, p_ttl_ms, p_renew_ms, p_window, pg_backend_pid(),
          (SELECT a.backend_start FROM pg_stat_get_activity(pg_backend_pid()) a))
  ON CONFLICT (name) DO UPDATE SET
    owner = EXCLUDED.owner, generation = greatest(next_token(l.generation, v_epoch), v_floor), acquired_at = now(),
    renewed_at = now(), expires_at = EXCLUDED.expires_at, released_at = NULL,
    ttl_ms = EXCLUDED.ttl_ms, renew_interval_ms = EXCLUDED.renew_interval_ms,
    window_key = EXCLUDED.window_key, backend_pid = EXCLUDED.backend_pid,
    backend_start = EXCLUDED.backend_start
  WHERE l.expires_at <= now()
  RETURNING l.generation INTO v_gen;
  END IF;
  EXCEPTION WHEN lock_not_available THEN
    v_gen := NULL;
  END;
  PERFORM set_config('lock_timeout', '0', true);
  END IF;

  IF v_gate.reason IS NOT NULL THEN
    PERFORM register_job(p_job, p_ttl_ms, p_spec);
    outcome := window_refused(p_job, p_owner, NULL, p_window, p_scheduled_at, v_gate.reason, v_gate.retained_from,
                              p_max_delay_ms, p_host_time);
    completed_at := v_gate.completed_at;
    RETURN NEXT; RETURN;
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
      SELECT 1 FROM pg_stat_get_activity(v_prev.backend_pid) a
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

  -- 007: the generation taken over lost its lease, whether or not its owner could say so:
  -- its unfinished window is lost (a window it claimed and we claim again is reset below),
  -- and the loss is recorded under its owner and host, once (record_event keeps one per
  -- generation, so a finish that said so first, or comes late, adds nothing). Not when the
  -- previous owner is this very runner: an acquisition whose answer it never got.
  IF v_prev.name IS NOT NULL AND v_prev.released_at IS NULL AND v_prev.owner IS DISTINCT FROM p_owner THEN
    UPDATE windows w SET outcome = 'lost', finished_at = now()
     WHERE w.job = p_job AND w.generation = v_prev.generation AND w.completed_at IS NULL AND w.outcome = 'running';
    PERFORM record_event(p_job, 'lease-lost', v_prev.window_key, v_prev.owner, v_prev.generation, p_host_time,
      jsonb_build_object('recorded_by', 'takeover', 'taken_by', p_owner, 'taken_generation', v_gen));
  END IF;

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
      -- Completed between our check and the lease (cannot happen since the check is repeated
      -- under the lease row lock, kept as a guard): give the lease back.
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

-- claim_window: as in sql/functions/claim_window.sql
CREATE OR REPLACE FUNCTION claim_window(
  p_job text, p_owner text, p_generation bigint, p_window text, p_scheduled_at timestamptz,
  p_rerun boolean, p_max_delay_ms bigint, p_host_time timestamptz, p_detail jsonb
) RETURNS TABLE (outcome text, attempt integer, completed_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_lease leases%ROWTYPE;
  v_gate record;
  v_attempt integer;
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  db_now := now();
  -- The lease row first, as acquire() and finish() lock it: they serialize there.
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  IF NOT FOUND OR v_lease.owner <> p_owner OR v_lease.generation <> p_generation
     OR v_lease.expires_at <= now() OR v_lease.released_at IS NOT NULL
     -- 020: a lease of an earlier history (before a failover or restore) claims nothing more.
     OR NOT token_current(p_generation) THEN
    outcome := 'not-held';
    RETURN NEXT; RETURN;
  END IF;

  SELECT * INTO v_gate FROM window_gate(p_job, p_window, p_scheduled_at, p_rerun, p_max_delay_ms, true);
  IF v_gate.reason IS NOT NULL THEN
    outcome := window_refused(p_job, p_owner, p_generation, p_window, p_scheduled_at, v_gate.reason,
                              v_gate.retained_from, p_max_delay_ms, p_host_time);
    completed_at := v_gate.completed_at;
    RETURN NEXT; RETURN;
  END IF;

  INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation)
  VALUES (p_job, p_window, p_scheduled_at, p_owner, p_generation)
  ON CONFLICT (job, window_key) DO UPDATE SET
    owner = EXCLUDED.owner, generation = EXCLUDED.generation,
    attempts = w.attempts + 1, started_at = now(), finished_at = NULL,
    completed_at = NULL, outcome = 'running', exit_code = NULL,
    scheduled_at = coalesce(w.scheduled_at, EXCLUDED.scheduled_at)
  WHERE w.completed_at IS NULL OR p_rerun
  RETURNING w.attempts INTO v_attempt;
  -- The lease names the window being worked on (status, a contender's holder_window).
  UPDATE leases l SET window_key = p_window WHERE l.name = p_job;
  attempt := v_attempt;
  PERFORM record_event(p_job, 'window-claimed', p_window, p_owner, p_generation, p_host_time,
    coalesce(p_detail, '{}'::jsonb) || jsonb_build_object('attempt', v_attempt, 'scheduled_at', p_scheduled_at, 'rerun', p_rerun));
  outcome := 'claimed';
  RETURN NEXT;
END $$;

-- clock_token_floor: as in sql/functions/clock_token_floor.sql
CREATE OR REPLACE FUNCTION clock_token_floor() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT floor(extract(epoch FROM now()) * 1000)::bigint - 1735689600000
$$;

-- durable_commit: as in sql/functions/durable_commit.sql
CREATE OR REPLACE FUNCTION durable_commit() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  IF current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'local', true);
  END IF;
END $$;

-- fence_epoch: as in sql/functions/fence_epoch.sql
CREATE OR REPLACE FUNCTION fence_epoch() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_row fence_epoch%ROWTYPE;
  v_tl bigint := server_timeline();
  v_sys text := server_system_id();
  v_step bigint;
  v_start timestamptz := pg_postmaster_start_time(); -- 021
BEGIN
  LOOP
    SELECT * INTO v_row FROM fence_epoch f;
    IF NOT FOUND THEN
      INSERT INTO fence_epoch (epoch, timeline, system_id, started_at) VALUES (greatest(coalesce(v_tl, 1) - 1, 0), v_tl, v_sys, v_start)
      ON CONFLICT (id) DO NOTHING;
      CONTINUE;
    END IF;
    -- 0: the same history, or nothing to compare with (a hidden timeline hides any failover).
    v_step := fence_epoch_step(v_row.timeline, v_row.system_id, v_tl, v_sys);
    IF v_step = 0 AND v_row.started_at IS NOT DISTINCT FROM v_start THEN RETURN v_row.epoch; END IF;
    IF v_step = 0 THEN
      UPDATE fence_epoch f SET started_at = v_start,
             token_floor = CASE WHEN v_row.started_at IS NULL THEN f.token_floor ELSE greatest(f.token_floor, clock_token_floor()) END
       WHERE f.epoch = v_row.epoch AND f.started_at IS NOT DISTINCT FROM v_row.started_at;
      IF FOUND THEN RETURN v_row.epoch; END IF;
      CONTINUE;
    END IF;
    IF v_row.epoch + v_step > 9223371 THEN
      RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
        MESSAGE = format('leasejob: fence epoch %s cannot advance by %s: tokens would not fit a bigint', v_row.epoch, v_step);
    END IF;
    UPDATE fence_epoch f SET epoch = v_row.epoch + v_step, timeline = v_tl, system_id = coalesce(v_sys, f.system_id),
           changed_at = now(), started_at = v_start, token_floor = 0, prev_epoch = v_row.epoch, prev_timeline = v_row.timeline, prev_system_id = v_row.system_id
     WHERE f.epoch = v_row.epoch;
    IF FOUND THEN RETURN v_row.epoch + v_step; END IF;
  END LOOP;
END $$;

-- finish: as in sql/functions/finish.sql
CREATE OR REPLACE FUNCTION finish(
  p_job text, p_owner text, p_generation bigint, p_window text, p_outcome text,
  p_exit_code integer, p_host_time timestamptz, p_detail jsonb
) RETURNS TABLE (held boolean, db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_lease leases%ROWTYPE;
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  db_now := now();
  -- Lock the lease row whoever holds it, first, as acquire() does: a finish that lost its
  -- lease and the new owner's acquire then serialize here instead of deadlocking later on
  -- the window and job rows.
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  held := FOUND AND v_lease.owner = p_owner AND v_lease.generation = p_generation AND v_lease.expires_at > now()
    -- 011: a lease of an earlier history (before a failover or restore) records no outcome.
    AND token_current(p_generation);

  -- A retry after an attempt whose reply was lost: if this generation already released the
  -- lease itself, that attempt committed, whoever has taken the lease since (008). Answer as
  -- it did and change nothing. One probe of events_released, on this path only.
  IF NOT held
     AND EXISTS (SELECT 1 FROM events e WHERE e.job = p_job AND e.generation = p_generation
                  AND e.kind = 'released' AND e.owner = p_owner
                  AND e.detail->>'by' IS NULL) THEN -- not `leasejob release` (by admin)
    held := true;
    RETURN NEXT;
    RETURN;
  END IF;

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

-- finish_window: as in sql/functions/finish_window.sql
-- finish_window(): record a window's outcome without releasing the lease, as finish() records
-- it (the current definition; catch-up and backfill, 013). Safe to repeat: an attempt that
-- committed with its answer lost is recognised by the window's own outcome.
CREATE OR REPLACE FUNCTION finish_window(
  p_job text, p_owner text, p_generation bigint, p_window text, p_outcome text,
  p_exit_code integer, p_host_time timestamptz, p_detail jsonb
) RETURNS TABLE (held boolean, db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_lease leases%ROWTYPE;
  v_window windows%ROWTYPE;
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  db_now := now();
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  held := FOUND AND v_lease.owner = p_owner AND v_lease.generation = p_generation
          AND v_lease.expires_at > now() AND v_lease.released_at IS NULL
          -- 011/017: a lease of an earlier history (before a failover or restore) records no outcome.
          AND token_current(p_generation);
  SELECT * INTO v_window FROM windows w WHERE w.job = p_job AND w.window_key = p_window AND w.generation = p_generation;

  -- A retry of an attempt that committed (its answer lost): the window already says so, with
  -- this exit code. 020: not a window marked by hand meanwhile (`mark` keeps the generation and
  -- clears the exit code): its stale holder is told it lost the lease. Without an exit code (a
  -- library task), the attempt's own window-<outcome> event tells (a rare path: retries, marks).
  IF v_window.finished_at IS NOT NULL AND v_window.outcome = p_outcome
     AND v_window.exit_code IS NOT DISTINCT FROM p_exit_code
     AND (p_exit_code IS NOT NULL OR EXISTS (
           SELECT 1 FROM events e WHERE e.job = p_job AND e.generation = p_generation
              AND e.kind = 'window-' || p_outcome AND e.window_key = p_window)) THEN
    held := true;
    RETURN NEXT; RETURN;
  END IF;

  IF held AND p_outcome IN ('completed', 'failed') THEN
    UPDATE windows w SET
      outcome = p_outcome, exit_code = p_exit_code, finished_at = now(),
      completed_at = CASE WHEN p_outcome = 'completed' THEN now() ELSE NULL END
     WHERE w.job = p_job AND w.window_key = p_window AND w.generation = p_generation;
    PERFORM record_event(p_job, 'window-' || p_outcome, p_window, p_owner, p_generation,
      p_host_time, jsonb_strip_nulls(jsonb_build_object('exit_code', p_exit_code, 'attempt', p_detail->'attempt',
        'duration_ms', p_detail->'duration_ms', 'aborted', p_detail->'aborted')));
  ELSIF NOT held THEN
    -- Lost before we could finish: the window stays open for whoever holds the lease now.
    UPDATE windows w SET outcome = 'lost', finished_at = now()
     WHERE w.job = p_job AND w.window_key = p_window AND w.generation = p_generation
       AND w.completed_at IS NULL;
    PERFORM record_event(p_job, 'lease-lost', p_window, p_owner, p_generation, p_host_time,
      jsonb_strip_nulls(jsonb_build_object('outcome', p_outcome, 'aborted', p_detail->'aborted')));
  END IF;
  RETURN NEXT;
END $$;

-- pause_job: as in sql/functions/pause_job.sql
CREATE OR REPLACE FUNCTION pause_job(p_job text, p_expect bigint, p_reason text, p_until timestamptz, p_until_ms bigint,
                          p_by text, p_host_time timestamptz)
RETURNS TABLE (status text, version bigint, seq bigint, paused_until timestamptz, db_now timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v jobs%ROWTYPE;
  v_until timestamptz;
  v_paused boolean;
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  db_now := now();
  SELECT * INTO v FROM jobs j WHERE j.name = p_job FOR UPDATE;
  IF NOT FOUND THEN status := 'unknown'; RETURN NEXT; RETURN; END IF;
  version := v.version;
  IF p_expect IS NOT NULL AND v.version <> p_expect THEN status := 'conflict'; RETURN NEXT; RETURN; END IF;
  v_until := coalesce(p_until, CASE WHEN p_until_ms IS NOT NULL THEN now() + make_interval(secs => p_until_ms / 1000.0) END);
  IF v_until IS NOT NULL AND v_until <= now() THEN status := 'bad-until'; RETURN NEXT; RETURN; END IF;
  v_paused := v.paused_at IS NOT NULL AND (v.paused_until IS NULL OR v.paused_until > now());
  UPDATE jobs j SET paused_at = CASE WHEN v_paused THEN j.paused_at ELSE now() END, paused_until = v_until,
                    pause_reason = p_reason, paused_by = p_by, version = j.version + 1, updated_at = now()
   WHERE j.name = p_job RETURNING j.version INTO version;
  seq := record_event(p_job, 'paused', NULL, p_by, NULL, p_host_time,
    jsonb_strip_nulls(jsonb_build_object('reason', p_reason, 'until', v_until, 'by', p_by, 'version', version,
      'previous_version', v.version, 'was_paused', v_paused)));
  status := 'done'; paused_until := v_until;
  RETURN NEXT;
END $$;

-- record_missed: as in sql/functions/record_missed.sql
CREATE OR REPLACE FUNCTION record_missed(
  p_job text, p_owner text, p_generation bigint, p_windows text[], p_scheduled_at timestamptz[],
  p_reason text, p_host_time timestamptz
) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_lease leases%ROWTYPE;
  v_n integer := 0;
  v_key text;
  v_at timestamptz;
  v_row text;
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  IF NOT FOUND OR v_lease.owner <> p_owner OR v_lease.generation <> p_generation
     OR v_lease.expires_at <= now() OR v_lease.released_at IS NOT NULL
     -- 020: a lease of an earlier history (before a failover or restore) records nothing.
     OR NOT token_current(p_generation) THEN
    RETURN NULL;
  END IF;
  FOR i IN 1 .. coalesce(array_length(p_windows, 1), 0) LOOP
    v_key := p_windows[i];
    v_at := p_scheduled_at[i];
    INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, attempts, outcome, finished_at)
    VALUES (p_job, v_key, v_at, p_owner, p_generation, 0, 'missed', now())
    ON CONFLICT (job, window_key) DO UPDATE SET outcome = 'missed', finished_at = now()
    WHERE w.completed_at IS NULL AND w.outcome <> 'missed'
    RETURNING w.window_key INTO v_row;
    IF v_row IS NOT NULL THEN
      v_n := v_n + 1;
      PERFORM record_event(p_job, 'window-missed', v_key, p_owner, p_generation, p_host_time,
        jsonb_build_object('scheduled_at', v_at, 'reason', p_reason));
    END IF;
    v_row := NULL;
  END LOOP;
  RETURN v_n;
END $$;

-- release_lease: as in sql/functions/release_lease.sql
CREATE OR REPLACE FUNCTION release_lease(p_job text, p_expect bigint, p_force boolean, p_by text, p_host_time timestamptz)
RETURNS TABLE (status text, version bigint, seq bigint, holder text, holder_generation bigint, holder_window text, live boolean, db_now timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v jobs%ROWTYPE;
  v_lease leases%ROWTYPE;
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  db_now := now();
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  SELECT * INTO v FROM jobs j WHERE j.name = p_job FOR UPDATE;
  IF NOT FOUND THEN status := 'unknown'; RETURN NEXT; RETURN; END IF;
  version := v.version;
  IF p_expect IS NOT NULL AND v.version <> p_expect THEN status := 'conflict'; RETURN NEXT; RETURN; END IF;
  IF v_lease.name IS NULL OR v_lease.expires_at <= now() THEN status := 'noop'; RETURN NEXT; RETURN; END IF;
  holder := v_lease.owner; holder_generation := v_lease.generation; holder_window := v_lease.window_key;
  -- As acquire() judges a stale holder: renewal overdue by half an interval, or its session gone.
  live := now() <= v_lease.renewed_at + make_interval(secs => v_lease.renew_interval_ms * 1.5 / 1000.0)
      AND NOT (v_lease.backend_pid IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM pg_stat_get_activity(v_lease.backend_pid) a
         WHERE a.pid = v_lease.backend_pid AND (a.backend_start IS NULL OR a.backend_start = v_lease.backend_start)));
  IF live AND NOT p_force THEN status := 'busy'; RETURN NEXT; RETURN; END IF;
  UPDATE leases l SET expires_at = now(), released_at = now() WHERE l.name = p_job;
  UPDATE jobs j SET version = j.version + 1, updated_at = now() WHERE j.name = p_job RETURNING j.version INTO version;
  -- detail.by stays 'admin': finish() tells an owner's own release from this one by it (008).
  seq := record_event(p_job, 'released', v_lease.window_key, v_lease.owner, v_lease.generation, p_host_time,
    jsonb_build_object('by', 'admin', 'operator', p_by, 'forced', p_force AND live, 'live', live, 'version', version));
  status := 'done';
  RETURN NEXT;
END $$;

-- renew: as in sql/functions/renew.sql
CREATE OR REPLACE FUNCTION renew(
  p_job text, p_owner text, p_generation bigint, p_ttl_ms integer, p_lock_timeout_ms integer
) RETURNS TABLE (db_now timestamptz, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
  RETURN QUERY
  UPDATE leases l
     SET expires_at = now() + make_interval(secs => p_ttl_ms / 1000.0),
         renewed_at = now(),
         backend_pid = pg_backend_pid(),
         backend_start = (SELECT a.backend_start FROM pg_stat_get_activity(pg_backend_pid()) a)
   WHERE l.name = p_job AND l.owner = p_owner AND l.generation = p_generation AND l.expires_at > now()
     AND l.released_at IS NULL
     -- 011: a lease of an earlier history (before a failover or restore) is not renewed.
     AND token_current(l.generation)
  RETURNING now(), l.expires_at;
END $$;

-- resume_job: as in sql/functions/resume_job.sql
CREATE OR REPLACE FUNCTION resume_job(p_job text, p_expect bigint, p_by text, p_host_time timestamptz)
RETURNS TABLE (status text, version bigint, seq bigint, db_now timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v jobs%ROWTYPE;
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  db_now := now();
  SELECT * INTO v FROM jobs j WHERE j.name = p_job FOR UPDATE;
  IF NOT FOUND THEN status := 'unknown'; RETURN NEXT; RETURN; END IF;
  version := v.version;
  IF p_expect IS NOT NULL AND v.version <> p_expect THEN status := 'conflict'; RETURN NEXT; RETURN; END IF;
  IF v.paused_at IS NULL OR (v.paused_until IS NOT NULL AND v.paused_until <= now()) THEN
    status := 'noop'; RETURN NEXT; RETURN;
  END IF;
  UPDATE jobs j SET paused_until = now(), version = j.version + 1, updated_at = now()
   WHERE j.name = p_job RETURNING j.version INTO version;
  seq := record_event(p_job, 'resumed', NULL, p_by, NULL, p_host_time,
    jsonb_strip_nulls(jsonb_build_object('by', p_by, 'version', version, 'previous_version', v.version,
      'paused_at', v.paused_at, 'paused_by', v.paused_by, 'reason', v.pause_reason)));
  status := 'done';
  RETURN NEXT;
END $$;

-- New: clock_token_floor, durable_commit. Not executable by PUBLIC; executable by every role already given the
-- others (the runner roles of `migrate --grant-to`), as for every leasejob function.
DO $$
DECLARE r record;
BEGIN
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', current_schema());
  FOR r IN SELECT DISTINCT a.grantee::regrole::text AS role FROM pg_proc p, aclexplode(p.proacl) a
            WHERE p.pronamespace = current_schema()::regnamespace AND p.proname = 'acquire'
              AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner LOOP
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %I TO %s', current_schema(), r.role);
  END LOOP;
END $$;
