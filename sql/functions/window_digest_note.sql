-- window_digest_note(): the row trigger that keeps window_digest (019) in step with the windows
-- table, whoever writes it (finish, finish_window, mark_window, skip_paused, a rerun in acquire
-- or claim_window, a hand edit). A window made final is added, and may become the job's latest
-- completion; one opened again (a rerun) is taken out, and when it was the latest completion,
-- the latest is found again in the ledger.
-- A final window with a scheduled time goes to finals, kept by that time: past 48 the oldest
-- are dropped down to 32 and floor_ms rises to the latest time dropped, so every such window
-- later than floor_ms is in finals. One without (a window `leasejob mark` wrote, perhaps ahead of
-- its time) goes to marks, kept whatever its age; past 64 of them marks_full is set and the
-- readers no longer answer from the digest alone for that job.
-- 023: a window completed before its scheduled time (marked ahead of its tick) is final, but
-- never the job's latest completion.
CREATE OR REPLACE FUNCTION window_digest_note() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v_scheduled boolean := NEW.scheduled_at IS NOT NULL;
  v_counts boolean := NEW.scheduled_at IS NULL OR NEW.scheduled_at <= NEW.completed_at;
  v_entry jsonb;
  v_n integer;
BEGIN
  IF NEW.completed_at IS NOT NULL THEN
    v_entry := jsonb_build_object(NEW.window_key,
      round(date_part('epoch', coalesce(NEW.scheduled_at, NEW.completed_at)) * 1000));
    INSERT INTO window_digest AS d (job, finals, marks, last_window, last_completed_at, last_started_at, last_generation)
    VALUES (NEW.job, CASE WHEN v_scheduled THEN v_entry ELSE '{}'::jsonb END, CASE WHEN v_scheduled THEN '{}'::jsonb ELSE v_entry END,
            CASE WHEN v_counts THEN NEW.window_key END, CASE WHEN v_counts THEN NEW.completed_at END,
            CASE WHEN v_counts THEN NEW.started_at END, CASE WHEN v_counts THEN NEW.generation END)
    ON CONFLICT (job) DO UPDATE SET
      finals = CASE WHEN v_scheduled THEN d.finals || v_entry ELSE d.finals - NEW.window_key END,
      marks = CASE WHEN v_scheduled THEN d.marks - NEW.window_key
                   WHEN d.marks ? NEW.window_key OR (SELECT count(*) FROM jsonb_object_keys(d.marks)) < 64
                   THEN d.marks || v_entry ELSE d.marks END,
      marks_full = d.marks_full OR (NOT v_scheduled AND NOT d.marks ? NEW.window_key
                                    AND (SELECT count(*) FROM jsonb_object_keys(d.marks)) >= 64),
      -- The latest completion as the readers ordered it: completed_at, then generation.
      last_window = CASE WHEN v_counts AND (d.last_completed_at IS NULL
                              OR (NEW.completed_at, NEW.generation) >= (d.last_completed_at, d.last_generation))
                         THEN NEW.window_key ELSE d.last_window END,
      last_started_at = CASE WHEN v_counts AND (d.last_completed_at IS NULL
                              OR (NEW.completed_at, NEW.generation) >= (d.last_completed_at, d.last_generation))
                         THEN NEW.started_at ELSE d.last_started_at END,
      last_generation = CASE WHEN v_counts AND (d.last_completed_at IS NULL
                              OR (NEW.completed_at, NEW.generation) >= (d.last_completed_at, d.last_generation))
                         THEN NEW.generation ELSE d.last_generation END,
      last_completed_at = CASE WHEN v_counts THEN greatest(d.last_completed_at, NEW.completed_at) ELSE d.last_completed_at END
    RETURNING (SELECT count(*) FROM jsonb_object_keys(d.finals)) INTO v_n;
    IF v_n > 48 THEN
      -- Trimmed in a batch, not at every completion: one statement in sixteen.
      WITH gone AS (
        SELECT e.key, e.value::float8 AS at
          FROM window_digest d2, jsonb_each(d2.finals) e
         WHERE d2.job = NEW.job
         ORDER BY e.value::float8 DESC, e.key DESC OFFSET 32)
      UPDATE window_digest d SET
        finals = d.finals - ARRAY(SELECT g.key FROM gone g),
        floor_ms = greatest(d.floor_ms, (SELECT max(g.at) FROM gone g))
       WHERE d.job = NEW.job;
    END IF;
  ELSIF TG_OP = 'UPDATE' AND OLD.completed_at IS NOT NULL THEN
    UPDATE window_digest d SET finals = d.finals - NEW.window_key, marks = d.marks - NEW.window_key
     WHERE d.job = NEW.job AND (d.finals ? NEW.window_key OR d.marks ? NEW.window_key);
    UPDATE window_digest d SET (last_window, last_completed_at, last_started_at, last_generation) = (
        SELECT w.window_key, w.completed_at, w.started_at, w.generation FROM windows w
         WHERE w.job = NEW.job AND w.completed_at IS NOT NULL AND (w.scheduled_at IS NULL OR w.scheduled_at <= w.completed_at)
         ORDER BY w.completed_at DESC, w.generation DESC LIMIT 1)
     WHERE d.job = NEW.job AND d.last_window = NEW.window_key;
  END IF;
  RETURN NULL;
END $$;
