-- acquire(): take the lease and claim the window in one round trip (the current definition).
-- outcome: acquired | busy (live holder) | stale (holder stopped renewing or lost its session:
-- wait until expires_at and try again) | done (window already completed) | missed (occurrence
-- older than max delay, or scheduled before the job's retention horizon: 014) | paused (the job
-- is paused: occurrence skipped, no lease; 012) | exhausted (the window's attempts reached the
-- budget, p_spec's max_attempts) | backoff (its last attempt failed less than the backoff ago,
-- p_spec's retry_delay_ms: expires_at is then when it may run again; both 024, attempt_budget(),
-- asked beside the gate). A takeover records the loss of the generation it replaces, once.
-- 020 (one gate): every "may this window run" is window_gate()'s, read again once the lease
-- row is locked, the pause then under the job's row lock, so that an acquisition and `pause`
-- are ordered: once pause has committed, no lease is taken until resume.
-- Sessions are looked up by pid with pg_stat_get_activity(pid), not the pg_stat_activity view
-- (which reports every session of the server before its WHERE picks one). The generation is the
-- fencing token, epoch * 10^12 + n, in the epoch of this server's history (fence_epoch()), n
-- never below the token floor of this server start (021). Committed durably (durable_commit).
-- 026: its claim of a window resets the row's claimed_as (a plain run's claim: the latest claim says how).
-- 035 (two clocks): with p_spec's `clock` (acquire_two_clock(), runners from 035 on), a lease the
-- database clock calls expired is taken over only when a second clock agrees that its holder has
-- stopped (two_clock_confirmed()); else the outcome is `unconfirmed` and the caller waits a full
-- TTL on its own monotonic clock watching the lease's renewal counter. Without it (older
-- callers), the database clock alone decides, as before. `clock` is not part of the job's spec.
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
  v_max integer := (p_spec->>'max_attempts')::integer; -- 024
  v_delay bigint := (p_spec->>'retry_delay_ms')::bigint;
  v_budget record;
  v_clock jsonb := nullif(p_spec->'clock', 'null'::jsonb); -- 035
  v_spec jsonb := nullif(p_spec - 'clock', '{}'::jsonb);
  v_confirmed boolean := true;
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
    PERFORM register_job(p_job, p_ttl_ms, v_spec);
    outcome := window_refused(p_job, p_owner, NULL, p_window, p_scheduled_at, v_gate.reason, v_gate.retained_from,
                              p_max_delay_ms, p_host_time);
    completed_at := v_gate.completed_at;
    RETURN NEXT; RETURN;
  END IF;

  -- 024: the attempt budget and the backoff, read without a lock: the common refusal (a
  -- trigger of an exhausted occurrence) takes no lease. Asked again below under the lease row.
  SELECT * INTO v_budget FROM attempt_budget(p_job, p_window, v_max, v_delay, p_rerun);
  IF v_budget.reason IS NOT NULL THEN
    PERFORM register_job(p_job, p_ttl_ms, v_spec);
    PERFORM skip_budget(p_job, p_owner, NULL, p_window, v_budget.reason, v_budget.attempts, v_max,
                        v_budget.next_at, p_host_time);
    outcome := v_budget.reason; attempt := v_budget.attempts; expires_at := v_budget.next_at;
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
  -- 035: a takeover needs the second clock's word too (an older caller's: the database clock's alone).
  v_confirmed := v_clock IS NULL OR v_prev.name IS NULL OR v_prev.released_at IS NOT NULL
    OR v_prev.owner = p_owner OR v_prev.expires_at > now()
    OR two_clock_confirmed(v_prev.generation, v_prev.renewals, v_prev.ttl_ms, v_prev.holder_offset_ms,
                           v_prev.holder_uncertainty_ms, v_clock);
  IF v_gate.reason IS NULL AND v_confirmed THEN
  INSERT INTO leases AS l (name, owner, generation, acquired_at, renewed_at, expires_at,
                           released_at, ttl_ms, renew_interval_ms, window_key, backend_pid, backend_start,
                           renewals, holder_offset_ms, holder_uncertainty_ms)
  VALUES (p_job, p_owner, greatest(next_token(NULL, v_epoch), v_floor), now(), now(), now() + make_interval(secs => p_ttl_ms / 1000.0),
          NULL, p_ttl_ms, p_renew_ms, p_window, pg_backend_pid(),
          (SELECT a.backend_start FROM pg_stat_get_activity(pg_backend_pid()) a),
          -- 035: a new generation's renewals count from 0; its offset, until its first renewal
          -- brings a measured one, is the database's estimate from this statement (host_ms, taken
          -- as it was sent: an upper bound, high by the statement's one-way delay).
          0, clock_offset_estimate(v_clock), CASE WHEN v_clock IS NULL THEN NULL ELSE 0 END)
  ON CONFLICT (name) DO UPDATE SET
    owner = EXCLUDED.owner, generation = greatest(next_token(l.generation, v_epoch), v_floor), acquired_at = now(),
    renewed_at = now(), expires_at = EXCLUDED.expires_at, released_at = NULL,
    ttl_ms = EXCLUDED.ttl_ms, renew_interval_ms = EXCLUDED.renew_interval_ms,
    window_key = EXCLUDED.window_key, backend_pid = EXCLUDED.backend_pid,
    backend_start = EXCLUDED.backend_start, renewals = 0, holder_offset_ms = EXCLUDED.holder_offset_ms,
    holder_uncertainty_ms = EXCLUDED.holder_uncertainty_ms
  WHERE l.expires_at <= now()
  RETURNING l.generation INTO v_gen;
  END IF;
  EXCEPTION WHEN lock_not_available THEN
    v_gen := NULL;
  END;
  PERFORM set_config('lock_timeout', '0', true);
  END IF;

  IF v_gate.reason IS NOT NULL THEN
    PERFORM register_job(p_job, p_ttl_ms, v_spec);
    outcome := window_refused(p_job, p_owner, NULL, p_window, p_scheduled_at, v_gate.reason, v_gate.retained_from,
                              p_max_delay_ms, p_host_time);
    completed_at := v_gate.completed_at;
    RETURN NEXT; RETURN;
  END IF;

  PERFORM register_job(p_job, p_ttl_ms, v_spec);

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
    -- 035: expired on the database clock, but the second clock does not agree (a stepped clock?).
    outcome := CASE WHEN v_prev.expires_at <= now() AND v_prev.released_at IS NULL AND NOT v_confirmed THEN 'unconfirmed'
                    WHEN v_stale OR v_session_gone THEN 'stale' ELSE 'busy' END;
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
    -- 024: asked again under the lease row, which every claim of this job holds: an attempt that
    -- ended since the read above, or one just found abandoned (lost above), counts.
    SELECT * INTO v_budget FROM attempt_budget(p_job, p_window, v_max, v_delay, p_rerun);
    IF v_budget.reason IS NOT NULL THEN
      UPDATE leases l SET expires_at = now(), released_at = now() WHERE l.name = p_job;
      PERFORM skip_budget(p_job, p_owner, v_gen, p_window, v_budget.reason, v_budget.attempts, v_max,
                          v_budget.next_at, p_host_time);
      outcome := v_budget.reason; attempt := v_budget.attempts; expires_at := v_budget.next_at;
      generation := NULL;
      RETURN NEXT; RETURN;
    END IF;
    INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, max_attempts)
    VALUES (p_job, p_window, p_scheduled_at, p_owner, v_gen, v_max)
    ON CONFLICT (job, window_key) DO UPDATE SET
      owner = EXCLUDED.owner, generation = EXCLUDED.generation,
      attempts = w.attempts + 1, started_at = now(), finished_at = NULL,
      completed_at = NULL, outcome = 'running', exit_code = NULL,
      scheduled_at = coalesce(w.scheduled_at, EXCLUDED.scheduled_at), max_attempts = EXCLUDED.max_attempts,
      claimed_as = NULL -- 026: a run's own claim (the latest claim says how the window was run)
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
