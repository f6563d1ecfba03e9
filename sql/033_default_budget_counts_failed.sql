-- 033: the default budget of `run` (031: an occurrence from a crontab's clock or --scheduled-time,
-- no --max-attempts) counts the attempts that failed, as docs/occurrence.md and run.md promise,
-- not every attempt: two holders that crashed (their attempts lost) left a `--retries 2` run of a
-- failing command one try instead of three (issue 44). The failed attempts are the window's
-- window-failed events (one per failed finish), found through a small partial index. Positive
-- budgets (--max-attempts) are judged as before: every attempt not completed spends them.
-- The index is built in this transaction, holding writes to events (as 008's; on a very large
-- log it can be built CONCURRENTLY beforehand, and is then kept).

CREATE INDEX IF NOT EXISTS events_window_failed ON events (job, window_key) WHERE kind = 'window-failed';

-- Functions: attempt_budget, each its whole current definition from sql/functions/.
-- CREATE OR REPLACE keeps the privileges granted on a function of the same signature;
-- SECURITY DEFINER and the pinned search_path are restated, as CREATE OR REPLACE resets them.

-- attempt_budget: as in sql/functions/attempt_budget.sql
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
