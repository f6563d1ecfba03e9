-- record_missed(): occurrences catch-up will not run (past --catch-up-limit, --max-delay),
-- recorded as missed with one window-missed event each, while the lease is held (the current
-- definition; 013). Final windows are left alone. NULL when the lease is not held (020: nor
-- current, its token of an earlier history).
CREATE OR REPLACE FUNCTION record_missed(
  p_job text, p_owner text, p_generation bigint, p_windows text[], p_scheduled_at timestamptz[],
  p_reason text, p_host_time timestamptz
) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_lease leases%ROWTYPE;
  v_n integer := 0;
  v_key text;
  v_at timestamptz;
  v_row text;
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  IF NOT FOUND OR v_lease.owner <> p_owner OR v_lease.generation <> p_generation
     OR v_lease.expires_at <= now() OR v_lease.released_at IS NOT NULL
     -- 020: a lease of an earlier history (before a failover or restore) records nothing.
     OR NOT token_current(p_generation) THEN
    RETURN NULL;
  END IF;
  FOR i IN 1 .. coalesce(array_length(p_windows, 1), 0) LOOP
    v_key := p_windows[i];
    v_at := p_scheduled_at[i];
    INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, attempts, outcome, finished_at)
    VALUES (p_job, v_key, v_at, p_owner, p_generation, 0, 'missed', now())
    ON CONFLICT (job, window_key) DO UPDATE SET outcome = 'missed', finished_at = now()
    WHERE w.completed_at IS NULL AND w.outcome <> 'missed'
    RETURNING w.window_key INTO v_row;
    IF v_row IS NOT NULL THEN
      v_n := v_n + 1;
      PERFORM record_event(p_job, 'window-missed', v_key, p_owner, p_generation, p_host_time,
        jsonb_build_object('scheduled_at', v_at, 'reason', p_reason));
    END IF;
    v_row := NULL;
  END LOOP;
  RETURN v_n;
END $$;
