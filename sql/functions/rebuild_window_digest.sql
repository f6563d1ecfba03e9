-- rebuild_window_digest(): window_digest (019) made again from the ledger, for one job or all:
-- migration 019 fills it so; after windows were written with the triggers off (a load with
-- session_replication_role = replica, the bench's seeding), run `SELECT rebuild_window_digest()`.
-- Per job: the newest 32 final windows with a scheduled time (finals, by that time; floor_ms the
-- latest time left out), the newest 64 without one (marks, by completed_at; marks_full when there
-- are more), and the latest completion (completed_at, then generation; never a window completed
-- before its scheduled time, 023). Returns the number of jobs written.
CREATE OR REPLACE FUNCTION rebuild_window_digest(p_job text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v_jobs bigint;
BEGIN
  DELETE FROM window_digest d WHERE p_job IS NULL OR d.job = p_job;
  INSERT INTO window_digest (job, finals, floor_ms, marks, marks_full,
                             last_window, last_completed_at, last_started_at, last_generation)
  SELECT r.job,
         coalesce(jsonb_object_agg(r.window_key, r.at) FILTER (WHERE r.scheduled AND r.rank <= 32), '{}'::jsonb),
         coalesce(max(r.at) FILTER (WHERE r.scheduled AND r.rank > 32), '-Infinity'::float8),
         coalesce(jsonb_object_agg(r.window_key, r.at) FILTER (WHERE NOT r.scheduled AND r.rank <= 64), '{}'::jsonb),
         count(*) FILTER (WHERE NOT r.scheduled AND r.rank > 64) > 0,
         (array_agg(r.window_key ORDER BY r.completed_at DESC, r.generation DESC) FILTER (WHERE r.counts))[1],
         max(r.completed_at) FILTER (WHERE r.counts),
         (array_agg(r.started_at ORDER BY r.completed_at DESC, r.generation DESC) FILTER (WHERE r.counts))[1],
         (array_agg(r.generation ORDER BY r.completed_at DESC, r.generation DESC) FILTER (WHERE r.counts))[1]
    FROM (SELECT w.job, w.window_key, w.completed_at, w.started_at, w.generation, w.scheduled_at IS NOT NULL AS scheduled,
                 w.scheduled_at IS NULL OR w.scheduled_at <= w.completed_at AS counts,
                 round(date_part('epoch', coalesce(w.scheduled_at, w.completed_at)) * 1000) AS at,
                 row_number() OVER (PARTITION BY w.job, w.scheduled_at IS NOT NULL
                                    ORDER BY coalesce(w.scheduled_at, w.completed_at) DESC, w.window_key DESC) AS rank
            FROM windows w
           WHERE w.completed_at IS NOT NULL AND (p_job IS NULL OR w.job = p_job)) r
   GROUP BY r.job;
  GET DIAGNOSTICS v_jobs = ROW_COUNT;
  RETURN v_jobs;
END $$;
