-- acquire_two_clock(): acquire() for runners from 035 on, with the two-clock takeover (docs/fencing.md
-- "Which clock decides what"). p_clock: host_ms, the host's wall time read just before the
-- statement was sent (after its connection was ready), for clock_offset_estimate(); and, once the
-- caller has watched the lease unchanged for a full TTL on its monotonic clock,
-- observed_generation and observed_renewals (two_clock_confirmed()). Answers acquire()'s row,
-- plus what the caller needs to watch and to say why it waits: the lease's renewal counter (for
-- the holder_generation answered), the holder's TTL, the holder's recorded offset and its
-- uncertainty, and the caller's own offset as this statement saw it; and for a stale holder,
-- whether its database session is gone (a crash: what the waiting run says), as acquire() judges
-- it (sql/006), so that the run need not ask apart. One statement, as acquire().
-- p_clock's skips (the run's --on-busy skip, its occurrence's scheduled_at as the run writes it):
-- the skip an answer means is recorded here, not in a second round trip: `done-skip` for done,
-- and with skips.busy `busy-skip` for busy (skip_recorded), as the runner would record them.
CREATE OR REPLACE FUNCTION acquire_two_clock(
  p_job text, p_owner text, p_ttl_ms integer, p_renew_ms integer,
  p_window text, p_scheduled_at timestamptz, p_rerun boolean, p_max_delay_ms bigint,
  p_host_time timestamptz, p_spec jsonb, p_lock_timeout_ms integer, p_clock jsonb
) RETURNS TABLE (
  outcome text, generation bigint, attempt integer, db_now timestamptz,
  holder text, holder_generation bigint, holder_window text, expires_at timestamptz,
  completed_at timestamptz, renewals bigint, holder_ttl_ms integer, holder_offset_ms integer,
  holder_uncertainty_ms integer, offset_ms integer, skip_recorded boolean, holder_gone boolean
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  a record;
  v_lease leases%ROWTYPE;
BEGIN
  SELECT * INTO a FROM acquire(p_job, p_owner, p_ttl_ms, p_renew_ms, p_window, p_scheduled_at, p_rerun,
    p_max_delay_ms, p_host_time,
    CASE WHEN p_clock IS NULL THEN p_spec ELSE coalesce(p_spec, '{}'::jsonb) || jsonb_build_object('clock', p_clock) END,
    p_lock_timeout_ms) AS x;
  outcome := a.outcome; generation := a.generation; attempt := a.attempt; db_now := a.db_now;
  holder := a.holder; holder_generation := a.holder_generation; holder_window := a.holder_window;
  expires_at := a.expires_at; completed_at := a.completed_at;
  offset_ms := clock_offset_estimate(p_clock);
  IF a.holder_generation IS NOT NULL THEN
    SELECT * INTO v_lease FROM leases l WHERE l.name = p_job;
    -- Read after acquire()'s own read: only when it is still the generation answered.
    IF v_lease.generation = a.holder_generation THEN
      renewals := v_lease.renewals; holder_ttl_ms := v_lease.ttl_ms;
      holder_offset_ms := v_lease.holder_offset_ms; holder_uncertainty_ms := v_lease.holder_uncertainty_ms;
      holder_gone := a.outcome = 'stale' AND v_lease.expires_at > now() AND v_lease.backend_pid IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM pg_stat_get_activity(v_lease.backend_pid) s
                         WHERE s.pid = v_lease.backend_pid
                           AND (s.backend_start IS NULL OR s.backend_start = v_lease.backend_start));
    END IF;
  END IF;
  skip_recorded := false;
  IF p_clock ? 'skips' AND a.outcome = 'done' THEN
    PERFORM record_event(p_job, 'done-skip', p_window, p_owner, NULL, p_host_time, jsonb_strip_nulls(jsonb_build_object(
      'completed_at', to_char(a.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))));
    skip_recorded := true;
  ELSIF p_clock->'skips'->>'busy' = 'true' AND a.outcome = 'busy' THEN
    PERFORM record_event(p_job, 'busy-skip', p_window, p_owner, NULL, p_host_time,
      jsonb_build_object('holder', a.holder, 'holder_generation', a.holder_generation::text, 'holder_window', a.holder_window)
      || CASE WHEN p_clock->'skips'->>'scheduled_at' IS NULL THEN '{}'::jsonb
              ELSE jsonb_build_object('scheduled_at', p_clock->'skips'->>'scheduled_at') END);
    skip_recorded := true;
  END IF;
  RETURN NEXT;
END $$;
