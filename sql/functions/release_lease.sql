-- release_lease(): `leasejob release`, a live holder only with p_force; a compare-and-set on
-- jobs.version (the current definition, from 012). Runs with the caller's rights.
-- 027: the holder's attempt still running is recorded lost in the same transaction: it spends
-- the attempt budget (attempt_budget()) as a crash taken over does, instead of staying
-- `running` for the next claim to start again uncounted (docs/occurrence.md).
CREATE OR REPLACE FUNCTION release_lease(p_job text, p_expect bigint, p_force boolean, p_by text, p_host_time timestamptz)
RETURNS TABLE (status text, version bigint, seq bigint, holder text, holder_generation bigint, holder_window text, live boolean, db_now timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v jobs%ROWTYPE;
  v_lease leases%ROWTYPE;
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  db_now := now();
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  SELECT * INTO v FROM jobs j WHERE j.name = p_job FOR UPDATE;
  IF NOT FOUND THEN status := 'unknown'; RETURN NEXT; RETURN; END IF;
  version := v.version;
  IF p_expect IS NOT NULL AND v.version <> p_expect THEN status := 'conflict'; RETURN NEXT; RETURN; END IF;
  IF v_lease.name IS NULL OR v_lease.expires_at <= now() THEN status := 'noop'; RETURN NEXT; RETURN; END IF;
  holder := v_lease.owner; holder_generation := v_lease.generation; holder_window := v_lease.window_key;
  -- As acquire() judges a stale holder: renewal overdue by half an interval, or its session gone.
  live := now() <= v_lease.renewed_at + make_interval(secs => v_lease.renew_interval_ms * 1.5 / 1000.0)
      AND NOT (v_lease.backend_pid IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM pg_stat_get_activity(v_lease.backend_pid) a
         WHERE a.pid = v_lease.backend_pid AND (a.backend_start IS NULL OR a.backend_start = v_lease.backend_start)));
  IF live AND NOT p_force THEN status := 'busy'; RETURN NEXT; RETURN; END IF;
  UPDATE leases l SET expires_at = now(), released_at = now() WHERE l.name = p_job;
  UPDATE windows w SET outcome = 'lost', finished_at = now()
   WHERE w.job = p_job AND w.generation = v_lease.generation AND w.completed_at IS NULL AND w.outcome = 'running';
  UPDATE jobs j SET version = j.version + 1, updated_at = now() WHERE j.name = p_job RETURNING j.version INTO version;
  -- detail.by stays 'admin': finish() tells an owner's own release from this one by it (008).
  seq := record_event(p_job, 'released', v_lease.window_key, v_lease.owner, v_lease.generation, p_host_time,
    jsonb_build_object('by', 'admin', 'operator', p_by, 'forced', p_force AND live, 'live', live, 'version', version));
  status := 'done';
  RETURN NEXT;
END $$;
