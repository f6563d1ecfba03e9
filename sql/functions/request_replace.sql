-- request_replace(): `run --on-busy replace` asks the live holder of a job's lease to stop,
-- through the lease row (025). Only a holder running an *earlier* occurrence is asked: the same
-- window (`same-window`), a holder with no window or one not scheduled before p_scheduled_at
-- (`not-earlier`) is left alone. A lease no longer held answers `free` (acquire again). The
-- holder learns it at its next renewal (replace_requested), stops its child as on a lost lease,
-- records its window `replaced` and releases. The first request for a generation records a
-- replace-requested event against the holder's window.
CREATE OR REPLACE FUNCTION request_replace(
  p_job text, p_window text, p_scheduled_at timestamptz, p_requester text, p_host_time timestamptz
) RETURNS TABLE (outcome text, holder text, holder_generation bigint, holder_window text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_lease leases%ROWTYPE;
  v_held_at timestamptz;
BEGIN
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  IF NOT FOUND OR v_lease.released_at IS NOT NULL OR v_lease.expires_at <= now() THEN
    outcome := 'free';
    RETURN NEXT; RETURN;
  END IF;
  holder := v_lease.owner; holder_generation := v_lease.generation; holder_window := v_lease.window_key;
  IF v_lease.window_key IS NOT DISTINCT FROM p_window THEN
    outcome := 'same-window';
    RETURN NEXT; RETURN;
  END IF;
  SELECT w.scheduled_at INTO v_held_at FROM windows w
   WHERE w.job = p_job AND w.window_key = v_lease.window_key AND w.generation = v_lease.generation;
  IF v_lease.window_key IS NULL OR p_scheduled_at IS NULL OR v_held_at IS NULL OR v_held_at >= p_scheduled_at THEN
    outcome := 'not-earlier';
    RETURN NEXT; RETURN;
  END IF;
  IF v_lease.replace_generation IS DISTINCT FROM v_lease.generation THEN
    UPDATE leases l SET replace_by = p_requester, replace_window = p_window, replace_generation = v_lease.generation
     WHERE l.name = p_job;
    PERFORM record_event(p_job, 'replace-requested', v_lease.window_key, v_lease.owner, v_lease.generation,
      p_host_time, jsonb_build_object('by', p_requester, 'for_window', p_window));
  END IF;
  outcome := 'requested';
  RETURN NEXT;
END $$;
