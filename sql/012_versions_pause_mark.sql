-- 012: versions instead of last-write-wins (seed 003), pause/resume, mark, guarded release.
-- - jobs.version counts changes to the job's record: registry settings, pause and resume,
--   windows marked by hand, administrative releases. Runs do not bump it (their order is the
--   event sequence and the generation). Every operator write is a compare-and-set on it.
-- - register_job(): a run that carries no schedule settings never erases a registered
--   schedule (a manual `run --window x` of a scheduled job leaves the registry alone); a run
--   whose settings differ from a registered schedule's adopts them (the newest deployment
--   decides), bumps the version, records a `job-changed` event (old, new, which owner) and
--   says so to the caller with a NOTICE that the runner logs as a warning.
-- - acquire(): a paused job runs nothing (skip_paused); the one change is marked 012.
-- - pause_job, resume_job, mark_window, release_lease: the operator writes, each one statement.
--   They run with the caller's rights (not SECURITY DEFINER): a runner role granted EXECUTE by
--   `migrate --grant-to` still cannot write the tables, so operators run them as the owner.
-- Same signatures for register_job and acquire, so the privileges granted on them are kept;
-- SECURITY DEFINER and the pinned search_path are restated, as CREATE OR REPLACE resets them.

ALTER TABLE jobs
  ADD COLUMN IF NOT EXISTS version      bigint NOT NULL DEFAULT 0,
  -- A pause is [paused_at, paused_until): paused_until NULL is open-ended; resume sets it to
  -- now(), so the interval stays recorded and monitoring knows which ticks were paused.
  ADD COLUMN IF NOT EXISTS paused_at    timestamptz,
  ADD COLUMN IF NOT EXISTS paused_until timestamptz,
  ADD COLUMN IF NOT EXISTS pause_reason text,
  ADD COLUMN IF NOT EXISTS paused_by    text;

-- check counts recent job-changed events per job (hosts that keep disagreeing).
CREATE INDEX IF NOT EXISTS events_job_changed ON events (job, db_time) WHERE kind = 'job-changed';

CREATE OR REPLACE FUNCTION register_job(p_job text, p_ttl_ms integer, p_spec jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_old jobs%ROWTYPE;
  v_new jsonb;
  v_old_spec jsonb;
  v_version bigint;
BEGIN
  IF p_spec IS NULL THEN RETURN; END IF;
  -- Unchanged (the common case): nothing written, no row lock (a herd would queue on it).
  SELECT * INTO v_old FROM jobs j WHERE j.name = p_job;
  IF FOUND AND ((v_old.schedule, v_old.tz, v_old.window_mode, v_old.window_format, v_old.window_offset, v_old.ttl_ms,
                 v_old.max_delay_ms, v_old.alert_after_ms)
                IS NOT DISTINCT FROM
                (p_spec->>'schedule', p_spec->>'tz', p_spec->>'window_mode', p_spec->>'window_format',
                 p_spec->>'window_offset', p_ttl_ms, (p_spec->>'max_delay_ms')::bigint,
                 (p_spec->>'alert_after_ms')::bigint)
             -- A run with no schedule settings says nothing about the schedule: never erases it.
             OR (v_old.schedule IS NOT NULL AND p_spec->>'schedule' IS NULL AND p_spec->>'window_mode' IS DISTINCT FROM 'schedule')) THEN
    RETURN;
  END IF;
  INSERT INTO jobs AS j (name) VALUES (p_job) ON CONFLICT (name) DO NOTHING;
  SELECT * INTO v_old FROM jobs j WHERE j.name = p_job FOR UPDATE;
  v_new := jsonb_build_object('schedule', p_spec->>'schedule', 'tz', p_spec->>'tz', 'window_mode', p_spec->>'window_mode',
    'window_format', p_spec->>'window_format', 'window_offset', p_spec->>'window_offset', 'ttl_ms', p_ttl_ms,
    'max_delay_ms', (p_spec->>'max_delay_ms')::bigint, 'alert_after_ms', (p_spec->>'alert_after_ms')::bigint);
  v_old_spec := jsonb_build_object('schedule', v_old.schedule, 'tz', v_old.tz, 'window_mode', v_old.window_mode,
    'window_format', v_old.window_format, 'window_offset', v_old.window_offset, 'ttl_ms', v_old.ttl_ms,
    'max_delay_ms', v_old.max_delay_ms, 'alert_after_ms', v_old.alert_after_ms);
  -- Checked again under the row lock: a concurrent run may have registered the same.
  IF v_old_spec = v_new OR (v_old.schedule IS NOT NULL AND p_spec->>'schedule' IS NULL AND p_spec->>'window_mode' IS DISTINCT FROM 'schedule') THEN
    RETURN;
  END IF;
  UPDATE jobs j SET
    schedule = v_new->>'schedule', tz = v_new->>'tz', window_mode = v_new->>'window_mode',
    window_format = v_new->>'window_format', window_offset = v_new->>'window_offset',
    ttl_ms = p_ttl_ms, max_delay_ms = (v_new->>'max_delay_ms')::bigint,
    alert_after_ms = (v_new->>'alert_after_ms')::bigint, updated_at = now(), version = j.version + 1
   WHERE j.name = p_job
  RETURNING j.version INTO v_version;
  -- A schedule registered before, or one now: a disagreement monitoring depends on, said as an
  -- event and to the caller. (A first registration, or unscheduled runs differing in their
  -- flags, only bump the version.)
  IF v_old.window_mode IS NOT NULL AND (v_old.schedule IS NOT NULL OR p_spec->>'schedule' IS NOT NULL) THEN
    PERFORM record_event(p_job, 'job-changed', NULL, p_spec->>'owner', NULL, NULL,
      jsonb_build_object('old', v_old_spec, 'new', v_new, 'version', v_version, 'adopted', true));
    RAISE NOTICE 'leasejob:job-changed' USING DETAIL = jsonb_build_object('old', v_old_spec, 'new', v_new, 'version', v_version)::text;
  END IF;
END $$;

-- A paused job's occurrence: recorded as skipped (final, so monitoring does not call it
-- overdue) when it has no window yet; a window already open (a failed attempt) stays open.
CREATE OR REPLACE FUNCTION skip_paused(p_job text, p_owner text, p_window text, p_scheduled_at timestamptz, p_host_time timestamptz)
RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_job jobs%ROWTYPE;
  v_recorded boolean := false;
BEGIN
  SELECT * INTO v_job FROM jobs j WHERE j.name = p_job;
  -- The job's row before the window's, as everywhere.
  PERFORM record_event(p_job, 'paused-skip', p_window, p_owner, NULL, p_host_time,
    jsonb_strip_nulls(jsonb_build_object('reason', v_job.pause_reason, 'paused_by', v_job.paused_by,
      'paused_at', v_job.paused_at, 'paused_until', v_job.paused_until, 'scheduled_at', p_scheduled_at)));
  IF p_window IS NOT NULL THEN
    INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, attempts, outcome, finished_at, completed_at)
    VALUES (p_job, p_window, p_scheduled_at, p_owner, 0, 0, 'skipped', now(), now())
    ON CONFLICT (job, window_key) DO NOTHING;
  END IF;
END $$;

CREATE OR REPLACE FUNCTION acquire(
  p_job text, p_owner text, p_ttl_ms integer, p_renew_ms integer,
  p_window text, p_scheduled_at timestamptz, p_rerun boolean, p_max_delay_ms bigint,
  p_host_time timestamptz, p_spec jsonb, p_lock_timeout_ms integer
) RETURNS TABLE (
  outcome text, generation bigint, attempt integer, db_now timestamptz,
  holder text, holder_generation bigint, holder_window text, expires_at timestamptz,
  completed_at timestamptz
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_prev leases%ROWTYPE;
  v_gen bigint;
  v_attempt integer;
  v_done timestamptz;
  v_stale boolean;
  v_session_gone boolean;
BEGIN
  db_now := now();

  -- Lock order: the lease row first (finish() too, whoever holds it), so acquire and finish
  -- of one job serialize there; the job's row (registry, event counter) before the window's
  -- where no lease is taken (the missed path).

  -- A completed window is final (completed_at is only ever set by a lease holder), so a
  -- late duplicate leaves without touching the lease.
  IF p_window IS NOT NULL AND NOT p_rerun THEN
    SELECT w.completed_at INTO v_done FROM windows w WHERE w.job = p_job AND w.window_key = p_window;
    IF v_done IS NOT NULL THEN
      PERFORM register_job(p_job, p_ttl_ms, p_spec);
      outcome := 'done'; completed_at := v_done;
      RETURN NEXT; RETURN;
    END IF;
  END IF;

  -- 012 (h23b): a paused job (until its paused_until, on this clock) takes no lease and runs
  -- nothing; its occurrence is recorded as skipped. A run already holding the lease goes on.
  IF EXISTS (SELECT 1 FROM jobs j WHERE j.name = p_job AND j.paused_at IS NOT NULL
              AND (j.paused_until IS NULL OR j.paused_until > now())) THEN
    PERFORM register_job(p_job, p_ttl_ms, p_spec);
    PERFORM skip_paused(p_job, p_owner, p_window, p_scheduled_at, p_host_time);
    outcome := 'paused';
    RETURN NEXT; RETURN;
  END IF;

  IF p_window IS NOT NULL AND p_max_delay_ms IS NOT NULL AND p_scheduled_at IS NOT NULL
     AND now() - p_scheduled_at > make_interval(secs => p_max_delay_ms / 1000.0) THEN
    -- The job's row before the window's, as everywhere.
    PERFORM register_job(p_job, p_ttl_ms, p_spec);
    PERFORM record_event(p_job, 'window-missed', p_window, p_owner, NULL, p_host_time,
      jsonb_build_object('scheduled_at', p_scheduled_at, 'max_delay_ms', p_max_delay_ms));
    INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, attempts, outcome, finished_at)
    VALUES (p_job, p_window, p_scheduled_at, p_owner, 0, 0, 'missed', now())
    ON CONFLICT (job, window_key) DO NOTHING;
    outcome := 'missed';
    RETURN NEXT; RETURN;
  END IF;

  SELECT * INTO v_prev FROM leases l WHERE l.name = p_job;

  -- A lease that is plainly live is busy: answer from this read, without queueing for the
  -- row lock behind every other contender (the upsert below would lock it to find out).
  IF v_prev.expires_at > now() THEN
    v_gen := NULL;
  ELSE
  -- The upsert locks the row even when its WHERE fails, so it waits behind an open fenced
  -- transaction (FOR SHARE). Bounded: a row locked that long means an owner is working (or
  -- paused mid-transaction); we answer from a plain read below instead of hanging.
  PERFORM set_config('lock_timeout', greatest(p_lock_timeout_ms, 1) || 'ms', true);
  BEGIN
  -- 007: the row as it is once ours to change. The plain read above may predate a finish
  -- that committed while we queued for the lock: that owner released it, it did not lose it.
  SELECT * INTO v_prev FROM leases l WHERE l.name = p_job FOR UPDATE;
  -- Such a finish may have completed our very window: then it is done, and no generation is
  -- spent on it (completion needs the lease row lock, which we now hold).
  IF p_window IS NOT NULL AND NOT p_rerun THEN
    SELECT w.completed_at INTO v_done FROM windows w WHERE w.job = p_job AND w.window_key = p_window;
  END IF;
  IF v_done IS NULL THEN
  INSERT INTO leases AS l (name, owner, generation, acquired_at, renewed_at, expires_at,
                           released_at, ttl_ms, renew_interval_ms, window_key, backend_pid, backend_start)
  VALUES (p_job, p_owner, 1, now(), now(), now() + make_interval(secs => p_ttl_ms / 1000.0),
          NULL, p_ttl_ms, p_renew_ms, p_window, pg_backend_pid(),
          (SELECT a.backend_start FROM pg_stat_get_activity(pg_backend_pid()) a))
  ON CONFLICT (name) DO UPDATE SET
    owner = EXCLUDED.owner, generation = l.generation + 1, acquired_at = now(),
    renewed_at = now(), expires_at = EXCLUDED.expires_at, released_at = NULL,
    ttl_ms = EXCLUDED.ttl_ms, renew_interval_ms = EXCLUDED.renew_interval_ms,
    window_key = EXCLUDED.window_key, backend_pid = EXCLUDED.backend_pid,
    backend_start = EXCLUDED.backend_start
  WHERE l.expires_at <= now()
  RETURNING l.generation INTO v_gen;
  END IF;
  EXCEPTION WHEN lock_not_available THEN
    v_gen := NULL;
  END;
  PERFORM set_config('lock_timeout', '0', true);
  END IF;

  IF v_done IS NOT NULL THEN
    PERFORM register_job(p_job, p_ttl_ms, p_spec);
    outcome := 'done'; completed_at := v_done;
    RETURN NEXT; RETURN;
  END IF;

  PERFORM register_job(p_job, p_ttl_ms, p_spec);

  IF v_gen IS NULL THEN
    -- Busy: describe the holder so the caller can skip, wait, or wait out a stale holder.
    SELECT * INTO v_prev FROM leases l WHERE l.name = p_job;
    holder := v_prev.owner; holder_generation := v_prev.generation;
    holder_window := v_prev.window_key; expires_at := v_prev.expires_at;
    -- Slack of half an interval absorbs a slow renewal round trip.
    v_stale := now() > v_prev.renewed_at + make_interval(secs => v_prev.renew_interval_ms * 1.5 / 1000.0);
    v_session_gone := v_prev.backend_pid IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM pg_stat_get_activity(v_prev.backend_pid) a
       WHERE a.pid = v_prev.backend_pid
         -- backend_start is NULL for another role's session without pg_read_all_stats.
         AND (a.backend_start IS NULL OR a.backend_start = v_prev.backend_start));
    outcome := CASE WHEN v_stale OR v_session_gone THEN 'stale' ELSE 'busy' END;
    RETURN NEXT; RETURN;
  END IF;

  generation := v_gen;
  PERFORM record_event(p_job,
    CASE WHEN v_prev.name IS NOT NULL AND v_prev.released_at IS NULL THEN 'stale-takeover' ELSE 'acquired' END,
    p_window, p_owner, v_gen, p_host_time,
    CASE WHEN v_prev.name IS NOT NULL AND v_prev.released_at IS NULL
         THEN jsonb_build_object('previous_owner', v_prev.owner, 'previous_generation', v_prev.generation,
                                 'previous_expired_at', v_prev.expires_at)
         ELSE '{}'::jsonb END);

  -- 007: the generation taken over lost its lease, whether or not its owner could say so:
  -- its unfinished window is lost (a window it claimed and we claim again is reset below),
  -- and the loss is recorded under its owner and host, once (record_event keeps one per
  -- generation, so a finish that said so first, or comes late, adds nothing). Not when the
  -- previous owner is this very runner: an acquisition whose answer it never got.
  IF v_prev.name IS NOT NULL AND v_prev.released_at IS NULL AND v_prev.owner IS DISTINCT FROM p_owner THEN
    UPDATE windows w SET outcome = 'lost', finished_at = now()
     WHERE w.job = p_job AND w.generation = v_prev.generation AND w.completed_at IS NULL AND w.outcome = 'running';
    PERFORM record_event(p_job, 'lease-lost', v_prev.window_key, v_prev.owner, v_prev.generation, p_host_time,
      jsonb_build_object('recorded_by', 'takeover', 'taken_by', p_owner, 'taken_generation', v_gen));
  END IF;

  IF p_window IS NOT NULL THEN
    INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation)
    VALUES (p_job, p_window, p_scheduled_at, p_owner, v_gen)
    ON CONFLICT (job, window_key) DO UPDATE SET
      owner = EXCLUDED.owner, generation = EXCLUDED.generation,
      attempts = w.attempts + 1, started_at = now(), finished_at = NULL,
      completed_at = NULL, outcome = 'running', exit_code = NULL,
      scheduled_at = coalesce(w.scheduled_at, EXCLUDED.scheduled_at)
    WHERE w.completed_at IS NULL OR p_rerun
    RETURNING w.attempts INTO v_attempt;

    IF v_attempt IS NULL THEN
      -- Completed between our check and the lease (cannot happen since the check is repeated
      -- under the lease row lock, kept as a guard): give the lease back.
      UPDATE leases l SET expires_at = now(), released_at = now() WHERE l.name = p_job;
      outcome := 'done'; generation := NULL;
      RETURN NEXT; RETURN;
    END IF;
    attempt := v_attempt;
    PERFORM record_event(p_job, 'window-claimed', p_window, p_owner, v_gen, p_host_time,
      jsonb_build_object('attempt', v_attempt, 'scheduled_at', p_scheduled_at, 'rerun', p_rerun));
  ELSE
    attempt := 1;
  END IF;

  outcome := 'acquired';
  RETURN NEXT;
END $$;

-- The operator writes. Each answers `status` and the job's `version` after it (the current one
-- when refused), and `seq`, the event that records the change:
--   unknown   no such job (nothing written)
--   conflict  p_expect is not the job's version (nothing written; the caller shows the state)
--   busy      a live owner holds the lease (mark: that window; release: without p_force)
--   noop      nothing to change (resume of a job not paused, release of a lease not held)
--   bad-until the pause would end at or before now() on this clock
--   done      written: version bumped, one event recorded

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

CREATE OR REPLACE FUNCTION resume_job(p_job text, p_expect bigint, p_by text, p_host_time timestamptz)
RETURNS TABLE (status text, version bigint, seq bigint, db_now timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v jobs%ROWTYPE;
BEGIN
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

-- p_outcome: completed (done by hand) | skipped. Lock order as acquire: the lease row, the job's,
-- then the window's.
CREATE OR REPLACE FUNCTION mark_window(p_job text, p_window text, p_outcome text, p_reason text, p_expect bigint,
                            p_by text, p_host_time timestamptz)
RETURNS TABLE (status text, version bigint, seq bigint, holder text, holder_generation bigint, previous_outcome text, db_now timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v jobs%ROWTYPE;
  v_lease leases%ROWTYPE;
  v_prev text;
BEGIN
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
  SELECT w.outcome INTO v_prev FROM windows w WHERE w.job = p_job AND w.window_key = p_window;
  previous_outcome := v_prev;
  UPDATE jobs j SET version = j.version + 1, updated_at = now() WHERE j.name = p_job RETURNING j.version INTO version;
  seq := record_event(p_job, 'window-marked', p_window, p_by, NULL, p_host_time,
    jsonb_strip_nulls(jsonb_build_object('outcome', p_outcome, 'reason', p_reason, 'by', p_by, 'version', version,
      'previous_version', v.version, 'previous_outcome', v_prev)));
  INSERT INTO windows AS w (job, window_key, owner, generation, attempts, outcome, finished_at, completed_at)
  VALUES (p_job, p_window, p_by, 0, 0, p_outcome, now(), now())
  ON CONFLICT (job, window_key) DO UPDATE SET outcome = EXCLUDED.outcome, finished_at = now(), completed_at = now(), exit_code = NULL;
  status := 'done';
  RETURN NEXT;
END $$;

-- A lease whose owner still renews (and whose session is there) is live: released only with
-- p_force. Its child is stopped at its owner's next renewal; its outcome is not recorded.
CREATE OR REPLACE FUNCTION release_lease(p_job text, p_expect bigint, p_force boolean, p_by text, p_host_time timestamptz)
RETURNS TABLE (status text, version bigint, seq bigint, holder text, holder_generation bigint, holder_window text, live boolean, db_now timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v jobs%ROWTYPE;
  v_lease leases%ROWTYPE;
BEGIN
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
  UPDATE jobs j SET version = j.version + 1, updated_at = now() WHERE j.name = p_job RETURNING j.version INTO version;
  -- detail.by stays 'admin': finish() tells an owner's own release from this one by it (008).
  seq := record_event(p_job, 'released', v_lease.window_key, v_lease.owner, v_lease.generation, p_host_time,
    jsonb_build_object('by', 'admin', 'operator', p_by, 'forced', p_force AND live, 'live', live, 'version', version));
  status := 'done';
  RETURN NEXT;
END $$;

-- Functions are executable by PUBLIC by default; only granted roles may call ours (as 003).
DO $$
BEGIN
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', current_schema());
END $$;
