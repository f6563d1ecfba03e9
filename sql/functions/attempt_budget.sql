-- attempt_budget(): whether an occurrence's attempt budget and backoff let it run now (024,
-- `run --max-attempts <n>`, `--retry-delay <dur>`), asked by acquire() and claim_window() in the
-- claiming transaction; at one gate (window_gate) it is one more branch. reason: NULL (may run) |
-- exhausted (the window's attempts reached p_max_attempts: final until --rerun or mark) |
-- backoff (its last attempt failed less than the backoff ago: next_at says when it may run).
-- The backoff after attempt k is p_retry_delay_ms * 2^(k-1), capped at 16 times the delay. A
-- window running now (or abandoned by a dead owner: the takeover marks it lost first) is not
-- judged here. attempts: the attempts made so far (0 when the window has no row).
-- 027 (docs/occurrence.md): every attempt that did not complete spends the budget, a replaced
-- one (--on-busy replace) too; the backoff follows only a failed one: a lost attempt (a crash
-- taken over, a lease lost or released) or a replaced one is not the command's failure, and the
-- trigger that finds it starts at once.
-- A negative p_max_attempts (031) is the default budget of a run given none (`run`: once per
-- occurrence from a crontab or --scheduled-time): -n allows n attempts that *failed*; an attempt
-- lost (its holder crashed, its lease was lost) or replaced does not spend it, so a later trigger
-- resumes it. 033: the failed attempts are counted (the window's window-failed events, one per
-- failed finish, index events_window_failed), not all its attempts, so crashed holders before a
-- `--retries r` run leave it its r + 1 tries.
CREATE OR REPLACE FUNCTION attempt_budget(
  p_job text, p_window text, p_max_attempts integer, p_retry_delay_ms bigint, p_rerun boolean
) RETURNS TABLE (reason text, attempts integer, next_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  w windows%ROWTYPE;
BEGIN
  attempts := 0;
  IF p_window IS NULL OR p_rerun OR (p_max_attempts IS NULL AND p_retry_delay_ms IS NULL) THEN
    RETURN NEXT; RETURN;
  END IF;
  SELECT * INTO w FROM windows x WHERE x.job = p_job AND x.window_key = p_window;
  IF NOT FOUND OR w.completed_at IS NOT NULL OR w.outcome NOT IN ('failed', 'lost', 'replaced') THEN
    attempts := coalesce(w.attempts, 0);
    RETURN NEXT; RETURN;
  END IF;
  attempts := w.attempts;
  IF p_max_attempts > 0 AND w.attempts >= p_max_attempts THEN
    reason := 'exhausted';
  ELSIF p_max_attempts < 0 AND (SELECT count(*) FROM events e WHERE e.job = p_job AND e.window_key = p_window
                                   AND e.kind = 'window-failed') >= -p_max_attempts THEN
    reason := 'exhausted';
  ELSIF p_retry_delay_ms IS NOT NULL AND w.finished_at IS NOT NULL AND w.outcome = 'failed' THEN
    next_at := w.finished_at + make_interval(secs =>
      least(p_retry_delay_ms * power(2, greatest(w.attempts, 1) - 1), p_retry_delay_ms * 16) / 1000.0);
    IF next_at > now() THEN reason := 'backoff'; ELSE next_at := NULL; END IF;
  END IF;
  RETURN NEXT;
END $$;
