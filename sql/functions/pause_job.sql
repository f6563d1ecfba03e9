-- pause_job(): `leasejob pause`, a compare-and-set on jobs.version (the current definition, from
-- 012). Runs with the caller's rights: the schema owner's, not a runner role's.
CREATE OR REPLACE FUNCTION pause_job(p_job text, p_expect bigint, p_reason text, p_until timestamptz, p_until_ms bigint,
                          p_by text, p_host_time timestamptz)
RETURNS TABLE (status text, version bigint, seq bigint, paused_until timestamptz, db_now timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v jobs%ROWTYPE;
  v_until timestamptz;
  v_paused boolean;
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  db_now := now();
  SELECT * INTO v FROM jobs j WHERE j.name = p_job FOR UPDATE;
  IF NOT FOUND THEN status := 'unknown'; RETURN NEXT; RETURN; END IF;
  version := v.version;
  IF p_expect IS NOT NULL AND v.version <> p_expect THEN status := 'conflict'; RETURN NEXT; RETURN; END IF;
  v_until := coalesce(p_until, CASE WHEN p_until_ms IS NOT NULL THEN now() + make_interval(secs => p_until_ms / 1000.0) END);
  IF v_until IS NOT NULL AND v_until <= now() THEN status := 'bad-until'; RETURN NEXT; RETURN; END IF;
  v_paused := v.paused_at IS NOT NULL AND (v.paused_until IS NULL OR v.paused_until > now());
  UPDATE jobs j SET paused_at = CASE WHEN v_paused THEN j.paused_at ELSE now() END, paused_until = v_until,
                    pause_reason = p_reason, paused_by = p_by, version = j.version + 1, updated_at = now()
   WHERE j.name = p_job RETURNING j.version INTO version;
  seq := record_event(p_job, 'paused', NULL, p_by, NULL, p_host_time,
    jsonb_strip_nulls(jsonb_build_object('reason', p_reason, 'until', v_until, 'by', p_by, 'version', version,
      'previous_version', v.version, 'was_paused', v_paused)));
  status := 'done'; paused_until := v_until;
  RETURN NEXT;
END $$;
