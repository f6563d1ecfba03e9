-- claim_window(): under a lease already held, claim one more window for its generation, as
-- acquire() claims its own (the current definition; catch-up and backfill, 013). outcome:
-- claimed | done (completed, skipped or marked: left alone) | missed (older than the max delay,
-- or before the retention horizon: recorded) | paused (the job was paused: not run, left open;
-- the sequence stops) | not-held (the lease is no longer this generation's, or the token is of
-- an earlier history: fence epoch) | exhausted | backoff (024: attempt_budget() beside the gate,
-- with the budget and delay in p_detail's max_attempts and retry_delay_ms; for backoff,
-- completed_at is when the window may run again). 020: the decision is window_gate()'s, as acquire()'s.
-- 026: the row keeps how it was claimed (claimed_as: 'backfill' when p_detail's backfill is true,
-- 'catch-up' for its role catch-up, else NULL), the latest claim's, so occurrences count by reason
-- without reading events.
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
  v_max integer := (p_detail->>'max_attempts')::integer; -- 024
  v_budget record;
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

  SELECT * INTO v_budget FROM attempt_budget(p_job, p_window, v_max, (p_detail->>'retry_delay_ms')::bigint, p_rerun);
  IF v_budget.reason IS NOT NULL THEN
    PERFORM skip_budget(p_job, p_owner, p_generation, p_window, v_budget.reason, v_budget.attempts, v_max,
                        v_budget.next_at, p_host_time);
    outcome := v_budget.reason; attempt := v_budget.attempts; completed_at := v_budget.next_at;
    RETURN NEXT; RETURN;
  END IF;

  INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, max_attempts, claimed_as)
  VALUES (p_job, p_window, p_scheduled_at, p_owner, p_generation, v_max,
          CASE WHEN p_detail->'backfill' = 'true'::jsonb THEN 'backfill'
               WHEN p_detail->>'role' = 'catch-up' THEN 'catch-up' END)
  ON CONFLICT (job, window_key) DO UPDATE SET
    owner = EXCLUDED.owner, generation = EXCLUDED.generation,
    attempts = w.attempts + 1, started_at = now(), finished_at = NULL,
    completed_at = NULL, outcome = 'running', exit_code = NULL,
    scheduled_at = coalesce(w.scheduled_at, EXCLUDED.scheduled_at), max_attempts = EXCLUDED.max_attempts,
    claimed_as = EXCLUDED.claimed_as
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
