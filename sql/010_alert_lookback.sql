-- 010: `run --alert-lookback`, how far back `check`, `status` and the exporter judge a job's due
-- occurrences (issue 20: every due occurrence past its grace that is not final is reported, not
-- only the latest). A column of the registry, written by register_job as the other settings.
-- status, check and the exporter read it through to_jsonb, so they still answer on a schema
-- not yet migrated (src/pg-store.ts); an older leasejob's runs leave it as it is (their spec has
-- no such key, and register_job then writes NULL: the default lookback).
-- Same signature, so the privileges granted on it are kept; SECURITY DEFINER and the pinned
-- search_path (003) are restated, as CREATE OR REPLACE resets them. register_job: as in
-- sql/functions/register_job.sql.

ALTER TABLE jobs ADD COLUMN IF NOT EXISTS alert_lookback_ms bigint;

CREATE OR REPLACE FUNCTION register_job(p_job text, p_ttl_ms integer, p_spec jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  -- 010: alert_lookback_ms compared and written with the other settings.
  IF p_spec IS NOT NULL AND NOT EXISTS (
       SELECT 1 FROM jobs j WHERE j.name = p_job
          AND (j.schedule, j.tz, j.window_mode, j.window_format, j.window_offset, j.ttl_ms,
               j.max_delay_ms, j.alert_after_ms, j.alert_lookback_ms)
              IS NOT DISTINCT FROM
              (p_spec->>'schedule', p_spec->>'tz', p_spec->>'window_mode', p_spec->>'window_format',
               p_spec->>'window_offset', p_ttl_ms, (p_spec->>'max_delay_ms')::bigint,
               (p_spec->>'alert_after_ms')::bigint, (p_spec->>'alert_lookback_ms')::bigint)) THEN
    INSERT INTO jobs AS j (name, schedule, tz, window_mode, window_format, window_offset,
                           ttl_ms, max_delay_ms, alert_after_ms, alert_lookback_ms)
    VALUES (p_job, p_spec->>'schedule', p_spec->>'tz', p_spec->>'window_mode',
            p_spec->>'window_format', p_spec->>'window_offset', p_ttl_ms,
            (p_spec->>'max_delay_ms')::bigint, (p_spec->>'alert_after_ms')::bigint,
            (p_spec->>'alert_lookback_ms')::bigint)
    ON CONFLICT (name) DO UPDATE SET
      schedule = EXCLUDED.schedule, tz = EXCLUDED.tz, window_mode = EXCLUDED.window_mode,
      window_format = EXCLUDED.window_format, window_offset = EXCLUDED.window_offset,
      ttl_ms = EXCLUDED.ttl_ms, max_delay_ms = EXCLUDED.max_delay_ms,
      alert_after_ms = EXCLUDED.alert_after_ms, alert_lookback_ms = EXCLUDED.alert_lookback_ms,
      updated_at = now();
  END IF;
END $$;
