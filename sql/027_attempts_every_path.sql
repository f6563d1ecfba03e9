-- 027: every attempt that did not complete spends `run --max-attempts`, whatever ended it (issue
-- 19, docs/occurrence.md). attempt_budget() now counts a replaced attempt (--on-busy replace) as
-- a failed or lost one, so an occurrence replaced N times is exhausted instead of starting again;
-- and applies the --retry-delay backoff only after a failed attempt, so a crash taken over (the
-- attempt recorded lost) starts at once instead of skipping as "within its backoff" forever.
-- release_lease() (`leasejob release`) records the released holder's attempt still running as
-- lost in the same transaction: before, it stayed `running`, and the next claim started the
-- child again without counting it.
-- Functions: attempt_budget, release_lease, each its whole current definition from sql/functions/.
-- CREATE OR REPLACE keeps the privileges granted on a function of the same signature;
-- SECURITY DEFINER and the pinned search_path are restated, as CREATE OR REPLACE resets them.

-- attempt_budget: as in sql/functions/attempt_budget.sql
CREATE OR REPLACE FUNCTION attempt_budget(
  p_job text, p_window text, p_max_attempts integer, p_retry_delay_ms bigint, p_rerun boolean
) RETURNS TABLE (reason text, attempts integer, next_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  w windows%ROWTYPE;
BEGIN
  attempts := 0;
  IF p_window IS NULL OR p_rerun OR (p_max_attempts IS NULL AND p_retry_delay_ms IS NULL) THEN
    RETURN NEXT; RETURN;
  END IF;
  SELECT * INTO w FROM windows x WHERE x.job = p_job AND x.window_key = p_window;
  IF NOT FOUND OR w.completed_at IS NOT NULL OR w.outcome NOT IN ('failed', 'lost', 'replaced') THEN
    attempts := coalesce(w.attempts, 0);
    RETURN NEXT; RETURN;
  END IF;
  attempts := w.attempts;
  IF p_max_attempts IS NOT NULL AND w.attempts >= p_max_attempts THEN
    reason := 'exhausted';
  ELSIF p_retry_delay_ms IS NOT NULL AND w.finished_at IS NOT NULL AND w.outcome = 'failed' THEN
    next_at := w.finished_at + make_interval(secs =>
      least(p_retry_delay_ms * power(2, greatest(w.attempts, 1) - 1), p_retry_delay_ms * 16) / 1000.0);
    IF next_at > now() THEN reason := 'backoff'; ELSE next_at := NULL; END IF;
  END IF;
  RETURN NEXT;
END $$;

-- release_lease: as in sql/functions/release_lease.sql
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
