-- skip_budget(): an occurrence not run because of its attempt budget or backoff (024): an
-- exhausted-skip or backoff-skip event with the attempts made, the budget and the next allowed
-- time, and the budget that judged an exhausted window kept on it (monitoring counts it
-- exhausted from there). Called by acquire() and claim_window() in the claiming transaction.
CREATE OR REPLACE FUNCTION skip_budget(
  p_job text, p_owner text, p_generation bigint, p_window text, p_reason text, p_attempts integer,
  p_max_attempts integer, p_next_at timestamptz, p_host_time timestamptz
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  PERFORM record_event(p_job, p_reason || '-skip', p_window, p_owner, p_generation, p_host_time,
    jsonb_strip_nulls(jsonb_build_object('attempts', p_attempts, 'max_attempts', p_max_attempts, 'next_at', p_next_at)));
  IF p_reason = 'exhausted' THEN
    UPDATE windows w SET max_attempts = p_max_attempts
     WHERE w.job = p_job AND w.window_key = p_window AND w.max_attempts IS DISTINCT FROM p_max_attempts;
  END IF;
END $$;
