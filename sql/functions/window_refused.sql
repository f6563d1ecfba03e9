-- window_refused(): what a window the gate refused (window_gate) leaves in the ledger, and the
-- outcome its caller answers (020): done (nothing written); missed (retention, max-delay: a
-- window-missed event, and the window recorded missed: a run's own when it has no row, a
-- sequence's, p_generation given, unless final); paused (a paused-skip
-- event; a run's own window is recorded skipped, a catch-up or backfill window, p_generation
-- given, stays open for after the resume). The caller has locked the job's row or takes it here first.
CREATE OR REPLACE FUNCTION window_refused(
  p_job text, p_owner text, p_generation bigint, p_window text, p_scheduled_at timestamptz,
  p_reason text, p_retained_from timestamptz, p_max_delay_ms bigint, p_host_time timestamptz
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  IF p_reason = 'done' THEN RETURN 'done'; END IF;
  IF p_reason = 'paused' THEN
    IF p_generation IS NULL THEN
      PERFORM skip_paused(p_job, p_owner, p_window, p_scheduled_at, p_host_time);
    ELSE
      PERFORM record_event(p_job, 'paused-skip', p_window, p_owner, p_generation, p_host_time,
        jsonb_build_object('scheduled_at', p_scheduled_at, 'reason', 'paused'));
    END IF;
    RETURN 'paused';
  END IF;
  PERFORM record_event(p_job, 'window-missed', p_window, p_owner, p_generation, p_host_time,
    CASE WHEN p_reason = 'retention'
         THEN jsonb_build_object('scheduled_at', p_scheduled_at, 'retained_from', p_retained_from, 'reason', 'retention')
         ELSE jsonb_build_object('scheduled_at', p_scheduled_at, 'max_delay_ms', p_max_delay_ms, 'reason', 'max-delay') END);
  INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, attempts, outcome, finished_at)
  VALUES (p_job, p_window, p_scheduled_at, p_owner, coalesce(p_generation, 0), 0, 'missed', now())
  ON CONFLICT (job, window_key) DO UPDATE SET outcome = 'missed', finished_at = now()
  -- A run's own window keeps an earlier failure; a sequence's is recorded missed unless final.
  WHERE p_generation IS NOT NULL AND w.completed_at IS NULL;
  RETURN 'missed';
END $$;
