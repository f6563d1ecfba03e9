-- 007: every lost lease is counted, once. A generation whose lease ended without its owner
-- releasing it was lost: its owner says so at finish when it still reaches the database, but
-- an owner cut off from the database until it exits (or killed, or paused past its TTL) never
-- does, and leasejob_leases_lost_total missed exactly the losses it exists to show. Now the
-- acquisition that takes such a lease over records the loss for the previous generation, and
-- marks that generation's unfinished window lost, as its own finish would have. Whichever of
-- the two comes second (a late finish, a takeover after that finish) records nothing: one
-- `lease-lost` event per generation. Both hold the lease row lock, so they cannot race.
-- Same signature, so the privileges granted on it are kept; SECURITY DEFINER and the pinned
-- search_path (003) are restated, as CREATE OR REPLACE resets them.

CREATE OR REPLACE FUNCTION record_event(
  p_job text, p_kind text, p_window text, p_owner text, p_generation bigint,
  p_host_time timestamptz, p_detail jsonb
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_seq bigint;
  v_host text := coalesce(nullif(split_part(p_owner, ':', 1), ''), 'unknown');
  v_prev_generation bigint;
  v_prev_window text;
BEGIN
  -- Lost leases are rare: the kind index finds any earlier record of this one at once.
  IF p_kind = 'lease-lost' AND EXISTS (
       SELECT 1 FROM events e WHERE e.kind = 'lease-lost' AND e.job = p_job AND e.generation = p_generation) THEN
    RETURN NULL;
  END IF;

  INSERT INTO jobs AS j (name, last_seq) VALUES (p_job, 1)
  ON CONFLICT (name) DO UPDATE SET last_seq = j.last_seq + 1
  RETURNING last_seq INTO v_seq;
  INSERT INTO events (job, seq, kind, window_key, owner, host, generation, host_time, detail)
  VALUES (p_job, v_seq, p_kind, p_window, p_owner, v_host, p_generation,
          p_host_time, coalesce(p_detail, '{}'::jsonb));
  INSERT INTO event_counts AS c (job, kind, host, n) VALUES (p_job, p_kind, v_host, 1)
  ON CONFLICT (job, kind, host) DO UPDATE SET n = c.n + 1, last_at = now();

  IF p_kind = 'stale-takeover' THEN
    v_prev_generation := (p_detail->>'previous_generation')::bigint;
    -- Before the new owner claims a window: an unfinished window still names the lost generation.
    UPDATE windows w SET outcome = 'lost', finished_at = now()
     WHERE w.job = p_job AND w.generation = v_prev_generation AND w.completed_at IS NULL
       AND w.outcome = 'running'
    RETURNING w.window_key INTO v_prev_window;
    PERFORM record_event(p_job, 'lease-lost', v_prev_window, p_detail->>'previous_owner', v_prev_generation,
      p_host_time, jsonb_build_object('recorded_by', 'takeover', 'taken_by', p_owner, 'taken_generation', p_generation));
  END IF;
  RETURN v_seq;
END $$;
