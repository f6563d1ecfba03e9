-- 038: `backfill --schedule` records the schedule of a job that has none in the registry, as `run`
-- does, so that check, status and the exporter judge the occurrences it leaves (a failed day, the
-- days after it a stopped backfill never ran). It sends `expected_from_ms`, its range's first
-- occurrence: register_job lowers the job's created_at (and schedule_since, when set) to it when
-- the registered schedule is the backfill's, so those occurrences are due, not before the
-- registration. A spec without it (every run) registers as before.
-- Functions: register_job, each its whole current definition from sql/functions/.
-- CREATE OR REPLACE keeps the privileges granted on a function of the same signature;
-- SECURITY DEFINER and the pinned search_path are restated, as CREATE OR REPLACE resets them.

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
  v_from timestamptz := to_timestamp((p_spec->>'expected_from_ms')::float8 / 1000);
BEGIN
  IF p_spec IS NULL THEN RETURN; END IF;
  <<registration>>
  BEGIN
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
    EXIT registration;
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
    EXIT registration;
  END IF;
  UPDATE jobs j SET
    schedule = v_new->>'schedule', tz = v_new->>'tz', window_mode = v_new->>'window_mode',
    window_format = v_new->>'window_format', window_offset = v_new->>'window_offset',
    ttl_ms = p_ttl_ms, max_delay_ms = (v_new->>'max_delay_ms')::bigint,
    alert_after_ms = (v_new->>'alert_after_ms')::bigint, alert_lookback_ms = (v_new->>'alert_lookback_ms')::bigint,
    expect_min_ms = (v_new->>'expect_min_ms')::bigint, expect_max_ms = (v_new->>'expect_max_ms')::bigint,
    updated_at = now(), version = j.version + 1,
    -- Not at a first registration: created_at says the same, and stays the one time to move.
    schedule_since = CASE WHEN v_old.window_mode IS NOT NULL
                           AND (j.schedule, j.tz, j.window_mode, j.window_format, j.window_offset)
                               IS DISTINCT FROM (v_new->>'schedule', v_new->>'tz', v_new->>'window_mode',
                                                 v_new->>'window_format', v_new->>'window_offset')
                          THEN now() ELSE j.schedule_since END
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
  END registration;
  -- 038: expected from the backfill's first occurrence, when the schedule registered is its own.
  -- (least() would take a NULL schedule_since, "never changed", for the earlier one: kept NULL.)
  IF v_from IS NOT NULL THEN
    UPDATE jobs j SET created_at = least(j.created_at, v_from),
                      schedule_since = CASE WHEN j.schedule_since IS NULL THEN NULL ELSE least(j.schedule_since, v_from) END
     WHERE j.name = p_job AND j.window_mode = 'schedule' AND j.schedule = p_spec->>'schedule'
       AND (j.created_at > v_from OR j.schedule_since > v_from);
  END IF;
END $$;
