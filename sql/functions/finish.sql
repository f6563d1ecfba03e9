-- finish(): record the window's outcome if this generation still holds the lease, then release
-- it (expire, never delete); the current definition. p_outcome: completed | failed | replaced | lost | none
-- (no window). Returns held=false when the lease was no longer ours (nothing recorded but the
-- event). Safe to retry: an earlier attempt that committed with its reply lost is recognised by
-- this owner's and generation's released event (index events_released), whoever holds the
-- lease since, and answered as it was, changing nothing.
-- A lease of an earlier history of the database (a failover, a restore) records no outcome (011).
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

  IF held AND p_window IS NOT NULL AND p_outcome IN ('completed', 'failed', 'replaced') THEN
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
