-- register_job(): record what a job is expected to do, for absence checks (the current
-- definition). Only written when it changed: an upsert would lock the job's row even when it
-- updates nothing, and a herd of contenders would queue on it.
CREATE OR REPLACE FUNCTION register_job(p_job text, p_ttl_ms integer, p_spec jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  IF p_spec IS NOT NULL AND NOT EXISTS (
       SELECT 1 FROM jobs j WHERE j.name = p_job
          AND (j.schedule, j.tz, j.window_mode, j.window_format, j.window_offset, j.ttl_ms,
               j.max_delay_ms, j.alert_after_ms)
              IS NOT DISTINCT FROM
              (p_spec->>'schedule', p_spec->>'tz', p_spec->>'window_mode', p_spec->>'window_format',
               p_spec->>'window_offset', p_ttl_ms, (p_spec->>'max_delay_ms')::bigint,
               (p_spec->>'alert_after_ms')::bigint)) THEN
    INSERT INTO jobs AS j (name, schedule, tz, window_mode, window_format, window_offset,
                           ttl_ms, max_delay_ms, alert_after_ms)
    VALUES (p_job, p_spec->>'schedule', p_spec->>'tz', p_spec->>'window_mode',
            p_spec->>'window_format', p_spec->>'window_offset', p_ttl_ms,
            (p_spec->>'max_delay_ms')::bigint, (p_spec->>'alert_after_ms')::bigint)
    ON CONFLICT (name) DO UPDATE SET
      schedule = EXCLUDED.schedule, tz = EXCLUDED.tz, window_mode = EXCLUDED.window_mode,
      window_format = EXCLUDED.window_format, window_offset = EXCLUDED.window_offset,
      ttl_ms = EXCLUDED.ttl_ms, max_delay_ms = EXCLUDED.max_delay_ms,
      alert_after_ms = EXCLUDED.alert_after_ms, updated_at = now();
  END IF;
END $$;
