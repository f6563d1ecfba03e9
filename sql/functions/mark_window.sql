-- mark_window(): `leasejob mark`, a window handled by hand made final; refused while a live
-- owner runs it; a compare-and-set on jobs.version (the current definition, from 012). 023: the
-- window's scheduled time is recorded when its key says it (a --window-from-schedule job's
-- ISO-8601 key, no --window-format or --window-offset), so that a window marked ahead of its tick
-- (scheduled_at later than completed_at) is final but never the job's latest completion.
CREATE OR REPLACE FUNCTION mark_window(p_job text, p_window text, p_outcome text, p_reason text, p_expect bigint,
                            p_by text, p_host_time timestamptz)
RETURNS TABLE (status text, version bigint, seq bigint, holder text, holder_generation bigint, previous_outcome text, db_now timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v jobs%ROWTYPE;
  v_lease leases%ROWTYPE;
  v_prev text;
  v_at timestamptz;
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  db_now := now();
  IF p_outcome NOT IN ('completed', 'skipped') THEN RAISE EXCEPTION 'mark_window: outcome must be completed or skipped'; END IF;
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  SELECT * INTO v FROM jobs j WHERE j.name = p_job FOR UPDATE;
  IF NOT FOUND THEN status := 'unknown'; RETURN NEXT; RETURN; END IF;
  version := v.version;
  IF p_expect IS NOT NULL AND v.version <> p_expect THEN status := 'conflict'; RETURN NEXT; RETURN; END IF;
  IF v_lease.expires_at > now() AND v_lease.window_key = p_window THEN
    status := 'busy'; holder := v_lease.owner; holder_generation := v_lease.generation;
    RETURN NEXT; RETURN;
  END IF;
  IF v.window_mode = 'schedule' AND v.window_format IS NULL AND v.window_offset IS NULL
     AND p_window ~ '^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$' THEN
    BEGIN
      v_at := p_window::timestamptz;
    EXCEPTION WHEN others THEN
      v_at := NULL; -- not a time after all (2026-02-30T...): no scheduled time
    END;
  END IF;
  SELECT w.outcome INTO v_prev FROM windows w WHERE w.job = p_job AND w.window_key = p_window;
  previous_outcome := v_prev;
  UPDATE jobs j SET version = j.version + 1, updated_at = now() WHERE j.name = p_job RETURNING j.version INTO version;
  seq := record_event(p_job, 'window-marked', p_window, p_by, NULL, p_host_time,
    jsonb_strip_nulls(jsonb_build_object('outcome', p_outcome, 'reason', p_reason, 'by', p_by, 'version', version,
      'previous_version', v.version, 'previous_outcome', v_prev)));
  INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, attempts, outcome, finished_at, completed_at)
  VALUES (p_job, p_window, v_at, p_by, 0, 0, p_outcome, now(), now())
  -- 020: the window is the operator's now (owner, generation 0): a stale holder's finish finds
  -- no window of its generation, and is told it lost the lease, not that it still holds it.
  ON CONFLICT (job, window_key) DO UPDATE SET outcome = EXCLUDED.outcome, finished_at = now(), completed_at = now(), exit_code = NULL,
    scheduled_at = coalesce(w.scheduled_at, EXCLUDED.scheduled_at), owner = EXCLUDED.owner, generation = 0;
  status := 'done';
  RETURN NEXT;
END $$;
