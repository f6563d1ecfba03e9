-- 015: --record-output. The last bytes a window's child wrote (stdout and stderr in arrival
-- order) are kept with the window, for the attempt that wrote them, so that `history` and the
-- status page show why a run failed. A new function, so `finish` is unchanged: the runner
-- records the tail just before it finishes, while it still holds the lease. bytea: the child's
-- output may be any bytes. Safe to apply again (IF NOT EXISTS, OR REPLACE).

ALTER TABLE windows
  ADD COLUMN IF NOT EXISTS output_tail       bytea,
  ADD COLUMN IF NOT EXISTS output_bytes      bigint,
  ADD COLUMN IF NOT EXISTS output_generation bigint,
  ADD COLUMN IF NOT EXISTS output_attempt    integer,
  ADD COLUMN IF NOT EXISTS output_at         timestamptz;

-- Only the claim of `p_generation` is written: a window claimed since by another generation
-- (a retry elsewhere) keeps that one's output. False when nothing was written.
CREATE OR REPLACE FUNCTION record_output(
  p_job text, p_window text, p_generation bigint, p_tail bytea, p_bytes bigint
) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  UPDATE windows w
     SET output_tail = p_tail, output_bytes = p_bytes, output_generation = p_generation,
         output_attempt = w.attempts, output_at = now()
   WHERE w.job = p_job AND w.window_key = p_window AND w.generation = p_generation;
  RETURN FOUND;
END $$;

-- Functions are executable by PUBLIC by default; only granted roles may call ours
-- (`leasejob migrate --grant-to <role>` grants it with the others).
REVOKE ALL ON FUNCTION record_output(text, text, bigint, bytea, bigint) FROM PUBLIC;
