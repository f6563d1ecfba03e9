-- 023 (issue 18), two changes:
-- `run --expect-duration <min>..<max>`: the bounds a job's runs are expected to take, kept in the
-- registry (jobs.expect_min_ms, expect_max_ms; NULL: no bound) so that `check`, the exporter and
-- its alerts can say when a run was too short or too long. register_job() compares, adopts and
-- reports them with the other settings; a leasejob before this one does not send them and
-- leaves them as they are.
-- Marks ahead of their tick: mark_window() records the window's scheduled time when its key says
-- it (an ISO-8601 key of a --window-from-schedule job without format or offset), and a window
-- completed before its scheduled time is final but never the job's latest completion (status,
-- the status page, leasejob_last_completed_window_timestamp_seconds): window_digest_note() and
-- rebuild_window_digest() leave it out of the digest's last_*. Marks made before this migration
-- have no scheduled time, and stay as they were. mark_window() keeps what 020 and 021 gave it
-- (the window the operator's, generation 0; a durable commit).
-- Functions: mark_window, rebuild_window_digest, register_job, window_digest_note, each its whole current definition from sql/functions/.
-- CREATE OR REPLACE keeps the privileges granted on a function of the same signature;
-- SECURITY DEFINER and the pinned search_path are restated, as CREATE OR REPLACE resets them.

ALTER TABLE jobs ADD COLUMN IF NOT EXISTS expect_min_ms bigint, ADD COLUMN IF NOT EXISTS expect_max_ms bigint;

-- mark_window: as in sql/functions/mark_window.sql
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

-- rebuild_window_digest: as in sql/functions/rebuild_window_digest.sql
CREATE OR REPLACE FUNCTION rebuild_window_digest(p_job text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v_jobs bigint;
BEGIN
  DELETE FROM window_digest d WHERE p_job IS NULL OR d.job = p_job;
  INSERT INTO window_digest (job, finals, floor_ms, marks, marks_full,
                             last_window, last_completed_at, last_started_at, last_generation)
  SELECT r.job,
         coalesce(jsonb_object_agg(r.window_key, r.at) FILTER (WHERE r.scheduled AND r.rank <= 32), '{}'::jsonb),
         coalesce(max(r.at) FILTER (WHERE r.scheduled AND r.rank > 32), '-Infinity'::float8),
         coalesce(jsonb_object_agg(r.window_key, r.at) FILTER (WHERE NOT r.scheduled AND r.rank <= 64), '{}'::jsonb),
         count(*) FILTER (WHERE NOT r.scheduled AND r.rank > 64) > 0,
         (array_agg(r.window_key ORDER BY r.completed_at DESC, r.generation DESC) FILTER (WHERE r.counts))[1],
         max(r.completed_at) FILTER (WHERE r.counts),
         (array_agg(r.started_at ORDER BY r.completed_at DESC, r.generation DESC) FILTER (WHERE r.counts))[1],
         (array_agg(r.generation ORDER BY r.completed_at DESC, r.generation DESC) FILTER (WHERE r.counts))[1]
    FROM (SELECT w.job, w.window_key, w.completed_at, w.started_at, w.generation, w.scheduled_at IS NOT NULL AS scheduled,
                 w.scheduled_at IS NULL OR w.scheduled_at <= w.completed_at AS counts,
                 round(date_part('epoch', coalesce(w.scheduled_at, w.completed_at)) * 1000) AS at,
                 row_number() OVER (PARTITION BY w.job, w.scheduled_at IS NOT NULL
                                    ORDER BY coalesce(w.scheduled_at, w.completed_at) DESC, w.window_key DESC) AS rank
            FROM windows w
           WHERE w.completed_at IS NOT NULL AND (p_job IS NULL OR w.job = p_job)) r
   GROUP BY r.job;
  GET DIAGNOSTICS v_jobs = ROW_COUNT;
  RETURN v_jobs;
END $$;

-- register_job: as in sql/functions/register_job.sql
CREATE OR REPLACE FUNCTION register_job(p_job text, p_ttl_ms integer, p_spec jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_old jobs%ROWTYPE;
  v_new jsonb;
  v_old_spec jsonb;
  v_version bigint;
  v_expect boolean := p_spec ? 'expect_min_ms';
BEGIN
  IF p_spec IS NULL THEN RETURN; END IF;
  -- Unchanged (the common case): nothing written, no row lock (a herd would queue on it).
  SELECT * INTO v_old FROM jobs j WHERE j.name = p_job;
  IF FOUND AND ((v_old.schedule, v_old.tz, v_old.window_mode, v_old.window_format, v_old.window_offset, v_old.ttl_ms,
                 v_old.max_delay_ms, v_old.alert_after_ms, v_old.alert_lookback_ms, v_old.expect_min_ms, v_old.expect_max_ms)
                IS NOT DISTINCT FROM
                (p_spec->>'schedule', p_spec->>'tz', p_spec->>'window_mode', p_spec->>'window_format',
                 p_spec->>'window_offset', p_ttl_ms, (p_spec->>'max_delay_ms')::bigint,
                 (p_spec->>'alert_after_ms')::bigint, (p_spec->>'alert_lookback_ms')::bigint,
                 CASE WHEN v_expect THEN (p_spec->>'expect_min_ms')::bigint ELSE v_old.expect_min_ms END,
                 CASE WHEN v_expect THEN (p_spec->>'expect_max_ms')::bigint ELSE v_old.expect_max_ms END)
             -- A run with no schedule settings says nothing about the schedule: never erases it.
             OR (v_old.schedule IS NOT NULL AND p_spec->>'schedule' IS NULL AND p_spec->>'window_mode' IS DISTINCT FROM 'schedule')) THEN
    RETURN;
  END IF;
  INSERT INTO jobs AS j (name) VALUES (p_job) ON CONFLICT (name) DO NOTHING;
  SELECT * INTO v_old FROM jobs j WHERE j.name = p_job FOR UPDATE;
  v_new := jsonb_build_object('schedule', p_spec->>'schedule', 'tz', p_spec->>'tz', 'window_mode', p_spec->>'window_mode',
    'window_format', p_spec->>'window_format', 'window_offset', p_spec->>'window_offset', 'ttl_ms', p_ttl_ms,
    'max_delay_ms', (p_spec->>'max_delay_ms')::bigint, 'alert_after_ms', (p_spec->>'alert_after_ms')::bigint,
    'alert_lookback_ms', (p_spec->>'alert_lookback_ms')::bigint, -- 018: the lookback (issue 20)
    'expect_min_ms', CASE WHEN v_expect THEN (p_spec->>'expect_min_ms')::bigint ELSE v_old.expect_min_ms END,
    'expect_max_ms', CASE WHEN v_expect THEN (p_spec->>'expect_max_ms')::bigint ELSE v_old.expect_max_ms END);
  v_old_spec := jsonb_build_object('schedule', v_old.schedule, 'tz', v_old.tz, 'window_mode', v_old.window_mode,
    'window_format', v_old.window_format, 'window_offset', v_old.window_offset, 'ttl_ms', v_old.ttl_ms,
    'max_delay_ms', v_old.max_delay_ms, 'alert_after_ms', v_old.alert_after_ms, 'alert_lookback_ms', v_old.alert_lookback_ms,
    'expect_min_ms', v_old.expect_min_ms, 'expect_max_ms', v_old.expect_max_ms);
  -- Checked again under the row lock: a concurrent run may have registered the same.
  IF v_old_spec = v_new OR (v_old.schedule IS NOT NULL AND p_spec->>'schedule' IS NULL AND p_spec->>'window_mode' IS DISTINCT FROM 'schedule') THEN
    RETURN;
  END IF;
  UPDATE jobs j SET
    schedule = v_new->>'schedule', tz = v_new->>'tz', window_mode = v_new->>'window_mode',
    window_format = v_new->>'window_format', window_offset = v_new->>'window_offset',
    ttl_ms = p_ttl_ms, max_delay_ms = (v_new->>'max_delay_ms')::bigint,
    alert_after_ms = (v_new->>'alert_after_ms')::bigint, alert_lookback_ms = (v_new->>'alert_lookback_ms')::bigint,
    expect_min_ms = (v_new->>'expect_min_ms')::bigint, expect_max_ms = (v_new->>'expect_max_ms')::bigint,
    updated_at = now(), version = j.version + 1
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

-- window_digest_note: as in sql/functions/window_digest_note.sql
CREATE OR REPLACE FUNCTION window_digest_note() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v_scheduled boolean := NEW.scheduled_at IS NOT NULL;
  v_counts boolean := NEW.scheduled_at IS NULL OR NEW.scheduled_at <= NEW.completed_at;
  v_entry jsonb;
  v_n integer;
BEGIN
  IF NEW.completed_at IS NOT NULL THEN
    v_entry := jsonb_build_object(NEW.window_key,
      round(date_part('epoch', coalesce(NEW.scheduled_at, NEW.completed_at)) * 1000));
    INSERT INTO window_digest AS d (job, finals, marks, last_window, last_completed_at, last_started_at, last_generation)
    VALUES (NEW.job, CASE WHEN v_scheduled THEN v_entry ELSE '{}'::jsonb END, CASE WHEN v_scheduled THEN '{}'::jsonb ELSE v_entry END,
            CASE WHEN v_counts THEN NEW.window_key END, CASE WHEN v_counts THEN NEW.completed_at END,
            CASE WHEN v_counts THEN NEW.started_at END, CASE WHEN v_counts THEN NEW.generation END)
    ON CONFLICT (job) DO UPDATE SET
      finals = CASE WHEN v_scheduled THEN d.finals || v_entry ELSE d.finals - NEW.window_key END,
      marks = CASE WHEN v_scheduled THEN d.marks - NEW.window_key
                   WHEN d.marks ? NEW.window_key OR (SELECT count(*) FROM jsonb_object_keys(d.marks)) < 64
                   THEN d.marks || v_entry ELSE d.marks END,
      marks_full = d.marks_full OR (NOT v_scheduled AND NOT d.marks ? NEW.window_key
                                    AND (SELECT count(*) FROM jsonb_object_keys(d.marks)) >= 64),
      -- The latest completion as the readers ordered it: completed_at, then generation.
      last_window = CASE WHEN v_counts AND (d.last_completed_at IS NULL
                              OR (NEW.completed_at, NEW.generation) >= (d.last_completed_at, d.last_generation))
                         THEN NEW.window_key ELSE d.last_window END,
      last_started_at = CASE WHEN v_counts AND (d.last_completed_at IS NULL
                              OR (NEW.completed_at, NEW.generation) >= (d.last_completed_at, d.last_generation))
                         THEN NEW.started_at ELSE d.last_started_at END,
      last_generation = CASE WHEN v_counts AND (d.last_completed_at IS NULL
                              OR (NEW.completed_at, NEW.generation) >= (d.last_completed_at, d.last_generation))
                         THEN NEW.generation ELSE d.last_generation END,
      last_completed_at = CASE WHEN v_counts THEN greatest(d.last_completed_at, NEW.completed_at) ELSE d.last_completed_at END
    RETURNING (SELECT count(*) FROM jsonb_object_keys(d.finals)) INTO v_n;
    IF v_n > 48 THEN
      -- Trimmed in a batch, not at every completion: one statement in sixteen.
      WITH gone AS (
        SELECT e.key, e.value::float8 AS at
          FROM window_digest d2, jsonb_each(d2.finals) e
         WHERE d2.job = NEW.job
         ORDER BY e.value::float8 DESC, e.key DESC OFFSET 32)
      UPDATE window_digest d SET
        finals = d.finals - ARRAY(SELECT g.key FROM gone g),
        floor_ms = greatest(d.floor_ms, (SELECT max(g.at) FROM gone g))
       WHERE d.job = NEW.job;
    END IF;
  ELSIF TG_OP = 'UPDATE' AND OLD.completed_at IS NOT NULL THEN
    UPDATE window_digest d SET finals = d.finals - NEW.window_key, marks = d.marks - NEW.window_key
     WHERE d.job = NEW.job AND (d.finals ? NEW.window_key OR d.marks ? NEW.window_key);
    UPDATE window_digest d SET (last_window, last_completed_at, last_started_at, last_generation) = (
        SELECT w.window_key, w.completed_at, w.started_at, w.generation FROM windows w
         WHERE w.job = NEW.job AND w.completed_at IS NOT NULL AND (w.scheduled_at IS NULL OR w.scheduled_at <= w.completed_at)
         ORDER BY w.completed_at DESC, w.generation DESC LIMIT 1)
     WHERE d.job = NEW.job AND d.last_window = NEW.window_key;
  END IF;
  RETURN NULL;
END $$;
