-- record_output (--record-output): keeps the tail of what a window's child wrote with the
-- window, for the attempt of p_generation only. A window claimed since by another generation
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
