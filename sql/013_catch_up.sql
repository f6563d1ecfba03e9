-- 013: catch-up and backfill run several windows, one after another, under one lease (one
-- generation, one FENCE_TOKEN). acquire() and finish() stay as they are (a lease with one
-- window, released at the end); three new functions work under a lease already held:
-- - claim_window(): claim one more window for the generation holding the lease, as acquire()
--   claims its own (done: left alone; older than the max delay: recorded missed).
-- - finish_window(): record a window's outcome without releasing the lease (the next window
--   follows; the last finish() releases it). Safe to repeat, as finish() is.
-- - record_missed(): occurrences catch-up will not run (past --catch-up-limit or --max-delay)
--   recorded as missed, one window-missed event each, so nothing runs them later and `status`
--   says so.
-- New functions: SECURITY DEFINER with the pinned search_path as every other (003), and not
-- executable by PUBLIC (003 revoked only what existed then); `migrate --grant-to` grants them.

CREATE OR REPLACE FUNCTION claim_window(
  p_job text, p_owner text, p_generation bigint, p_window text, p_scheduled_at timestamptz,
  p_rerun boolean, p_max_delay_ms bigint, p_host_time timestamptz, p_detail jsonb
) RETURNS TABLE (outcome text, attempt integer, completed_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_lease leases%ROWTYPE;
  v_done timestamptz;
  v_attempt integer;
BEGIN
  db_now := now();
  -- The lease row first, as acquire() and finish() lock it: they serialize there.
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  IF NOT FOUND OR v_lease.owner <> p_owner OR v_lease.generation <> p_generation
     OR v_lease.expires_at <= now() OR v_lease.released_at IS NOT NULL THEN
    outcome := 'not-held';
    RETURN NEXT; RETURN;
  END IF;

  IF NOT p_rerun THEN
    SELECT w.completed_at INTO v_done FROM windows w WHERE w.job = p_job AND w.window_key = p_window;
    IF v_done IS NOT NULL THEN
      outcome := 'done'; completed_at := v_done;
      RETURN NEXT; RETURN;
    END IF;
  END IF;

  IF p_max_delay_ms IS NOT NULL AND p_scheduled_at IS NOT NULL
     AND now() - p_scheduled_at > make_interval(secs => p_max_delay_ms / 1000.0) THEN
    PERFORM record_event(p_job, 'window-missed', p_window, p_owner, p_generation, p_host_time,
      jsonb_build_object('scheduled_at', p_scheduled_at, 'max_delay_ms', p_max_delay_ms, 'reason', 'max-delay'));
    INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, attempts, outcome, finished_at)
    VALUES (p_job, p_window, p_scheduled_at, p_owner, 0, 0, 'missed', now())
    ON CONFLICT (job, window_key) DO UPDATE SET outcome = 'missed', finished_at = now()
    WHERE w.completed_at IS NULL;
    outcome := 'missed';
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
  db_now := now();
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  held := FOUND AND v_lease.owner = p_owner AND v_lease.generation = p_generation
          AND v_lease.expires_at > now() AND v_lease.released_at IS NULL;
  SELECT * INTO v_window FROM windows w WHERE w.job = p_job AND w.window_key = p_window AND w.generation = p_generation;

  -- A retry of an attempt that committed (its answer lost): the window already says so.
  IF v_window.finished_at IS NOT NULL AND v_window.outcome = p_outcome THEN
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

-- p_windows and p_scheduled_at are parallel arrays. Only while the lease is held (no live
-- owner can be running any of them); a window already final is left alone. Returns how many
-- were recorded, or NULL when the lease is not held.
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
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  IF NOT FOUND OR v_lease.owner <> p_owner OR v_lease.generation <> p_generation
     OR v_lease.expires_at <= now() OR v_lease.released_at IS NOT NULL THEN
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

REVOKE ALL ON FUNCTION claim_window(text, text, bigint, text, timestamptz, boolean, bigint, timestamptz, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION finish_window(text, text, bigint, text, text, integer, timestamptz, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION record_missed(text, text, bigint, text[], timestamptz[], text, timestamptz) FROM PUBLIC;
