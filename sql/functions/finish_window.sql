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

  IF held AND p_outcome IN ('completed', 'failed', 'replaced') THEN
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
