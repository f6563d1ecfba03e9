-- record_event(): append an event with the next sequence number of its job, in the caller's
-- transaction, and count it in event_counts (the current definition). One `lease-lost` per
-- generation: whichever of the owner's finish and a takeover comes second records nothing.
CREATE OR REPLACE FUNCTION record_event(
  p_job text, p_kind text, p_window text, p_owner text, p_generation bigint,
  p_host_time timestamptz, p_detail jsonb
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_seq bigint;
  v_host text := coalesce(nullif(split_part(p_owner, ':', 1), ''), 'unknown');
BEGIN
  -- Lost leases are rare: the kind index finds an earlier record of this one at once.
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
  RETURN v_seq;
END $$;
