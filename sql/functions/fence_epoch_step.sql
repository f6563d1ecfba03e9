-- fence_epoch_step(): how far the fence epoch advances from the history a row was read on to
-- the server's now: 0 (same), the timeline's step (a later branch of the cluster), else 1.
CREATE OR REPLACE FUNCTION fence_epoch_step(p_timeline bigint, p_system_id text, p_tl bigint, p_sys text) RETURNS bigint
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT CASE WHEN p_tl IS NULL THEN 0
              WHEN p_timeline = p_tl AND (p_sys IS NULL OR p_system_id IS NULL OR p_system_id = p_sys) THEN 0
              WHEN p_timeline IS NOT NULL AND p_tl > p_timeline AND (p_sys IS NULL OR p_system_id IS NULL OR p_system_id = p_sys)
                THEN p_tl - p_timeline
              ELSE 1 END
$$;
