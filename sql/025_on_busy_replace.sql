-- 025: `run --on-busy replace` (issue 17). A run of a later occurrence asks the live holder of an
-- earlier one to stop, through the lease row: request_replace() sets leases.replace_* (never for
-- the holder's own window, nor for one not scheduled earlier); the holder reads it in its
-- renewal's statement (replace_requested()), stops its child, records its window `replaced` with
-- finish()/finish_window() (which now accept that outcome: the window stays open, as a failed one)
-- and releases. replace_generation ties a request to the generation asked, so a later holder of
-- the lease is never told to stop by an old request, and acquire() need not clear it.
-- Functions: finish, finish_window, replace_requested, request_replace, each its whole current definition from sql/functions/.
-- CREATE OR REPLACE keeps the privileges granted on a function of the same signature;
-- SECURITY DEFINER and the pinned search_path are restated, as CREATE OR REPLACE resets them.

ALTER TABLE leases ADD COLUMN IF NOT EXISTS replace_by text;
ALTER TABLE leases ADD COLUMN IF NOT EXISTS replace_window text;
ALTER TABLE leases ADD COLUMN IF NOT EXISTS replace_generation bigint;

-- finish: as in sql/functions/finish.sql
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

-- finish_window: as in sql/functions/finish_window.sql
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

-- replace_requested: as in sql/functions/replace_requested.sql
CREATE OR REPLACE FUNCTION replace_requested(p_job text, p_generation bigint) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT l.replace_window FROM leases l WHERE l.name = p_job AND l.replace_generation = p_generation;
$$;

-- request_replace: as in sql/functions/request_replace.sql
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

-- New: replace_requested, request_replace. Not executable by PUBLIC; executable by every role already given the
-- others (the runner roles of `migrate --grant-to`), as for every leasejob function.
DO $$
DECLARE r record;
BEGIN
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', current_schema());
  FOR r IN SELECT DISTINCT a.grantee::regrole::text AS role FROM pg_proc p, aclexplode(p.proacl) a
            WHERE p.pronamespace = current_schema()::regnamespace AND p.proname = 'acquire'
              AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner LOOP
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %I TO %s', current_schema(), r.role);
  END LOOP;
END $$;
