-- claim_window(): under a lease already held, claim one more window for its generation, as
-- acquire() claims its own (the current definition; catch-up and backfill, 013). outcome:
-- claimed | done (completed already, left alone) | missed (older than the max delay, recorded)
-- | not-held (the lease is no longer this generation's) | exhausted | backoff (024:
-- attempt_budget(), with the budget and delay in p_detail's max_attempts and retry_delay_ms;
-- for backoff, completed_at is when the window may run again).
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
  v_max integer := (p_detail->>'max_attempts')::integer; -- 024
  v_budget record;
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

  SELECT * INTO v_budget FROM attempt_budget(p_job, p_window, v_max, (p_detail->>'retry_delay_ms')::bigint, p_rerun);
  IF v_budget.reason IS NOT NULL THEN
    PERFORM skip_budget(p_job, p_owner, p_generation, p_window, v_budget.reason, v_budget.attempts, v_max,
                        v_budget.next_at, p_host_time);
    outcome := v_budget.reason; attempt := v_budget.attempts; completed_at := v_budget.next_at;
    RETURN NEXT; RETURN;
  END IF;

  INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, max_attempts)
  VALUES (p_job, p_window, p_scheduled_at, p_owner, p_generation, v_max)
  ON CONFLICT (job, window_key) DO UPDATE SET
    owner = EXCLUDED.owner, generation = EXCLUDED.generation,
    attempts = w.attempts + 1, started_at = now(), finished_at = NULL,
    completed_at = NULL, outcome = 'running', exit_code = NULL,
    scheduled_at = coalesce(w.scheduled_at, EXCLUDED.scheduled_at), max_attempts = EXCLUDED.max_attempts
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
