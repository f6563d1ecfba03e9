-- resume_job(): `leasejob resume`, a compare-and-set on jobs.version (the current definition,
-- from 012). Runs with the caller's rights.
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
