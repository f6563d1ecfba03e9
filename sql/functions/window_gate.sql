-- window_gate(): whether a window may run now, and if not why (020): the one decision every
-- path that can start a child passes (acquire() for a run, claim_window() for catch-up and
-- backfill), inside the transaction that takes or uses the lease. reason: NULL (may run) |
-- done (completed, skipped or marked) | retention (scheduled before the job's horizon: its
-- row may have been pruned, so the ledger no longer says whether it ran; prune aligns the
-- horizon to the start of a window key, so no later tick shares a pruned key) | paused |
-- max-delay. --rerun passes done and retention (it asks to run whatever the ledger says).
-- p_locked: the caller holds the lease row, and the pause is read under the job's row lock
-- (FOR NO KEY UPDATE, which pause_job's FOR UPDATE waits for): a pause that committed first is
-- seen, one that comes later waits for the caller's commit. A new condition is one more branch.
CREATE OR REPLACE FUNCTION window_gate(
  p_job text, p_window text, p_scheduled_at timestamptz, p_rerun boolean, p_max_delay_ms bigint, p_locked boolean
) RETURNS TABLE (reason text, completed_at timestamptz, retained_from timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_paused boolean;
BEGIN
  IF p_window IS NOT NULL AND NOT p_rerun THEN
    SELECT w.completed_at INTO completed_at FROM windows w WHERE w.job = p_job AND w.window_key = p_window;
    IF completed_at IS NOT NULL THEN reason := 'done'; RETURN NEXT; RETURN; END IF;
    -- After the done check: prune raises the horizon before it deletes a window, so a window
    -- found gone there finds the horizon here.
    IF p_scheduled_at IS NOT NULL THEN
      SELECT r.retained_from INTO retained_from FROM retention r WHERE r.job = p_job;
      IF p_scheduled_at < retained_from THEN reason := 'retention'; RETURN NEXT; RETURN; END IF;
    END IF;
  END IF;
  IF p_locked THEN
    SELECT j.paused_at IS NOT NULL AND (j.paused_until IS NULL OR j.paused_until > now()) INTO v_paused
      FROM jobs j WHERE j.name = p_job FOR NO KEY UPDATE;
  ELSE
    SELECT j.paused_at IS NOT NULL AND (j.paused_until IS NULL OR j.paused_until > now()) INTO v_paused
      FROM jobs j WHERE j.name = p_job;
  END IF;
  IF v_paused THEN reason := 'paused'; RETURN NEXT; RETURN; END IF;
  IF p_window IS NOT NULL AND p_max_delay_ms IS NOT NULL AND p_scheduled_at IS NOT NULL
     AND now() - p_scheduled_at > make_interval(secs => p_max_delay_ms / 1000.0) THEN
    reason := 'max-delay';
  END IF;
  RETURN NEXT;
END $$;
