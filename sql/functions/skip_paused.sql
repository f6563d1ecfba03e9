-- skip_paused(): a paused job's occurrence (the current definition, from 012): recorded as
-- skipped, final, when it has no window yet; a paused-skip event. Called by acquire().
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
