-- 011: fencing tokens that survive a failover. A standby that is promoted (or a point-in-time
-- restore) starts a new history from a point the old primary may have gone past: acquisitions
-- committed on the old primary and not yet replicated are lost, and the new primary issued
-- the same generation numbers again, so a paused old owner's FENCE_TOKEN was accepted there.
--
-- A token is now  epoch * 10^12 + n : n counts the job's acquisitions (today's generation
-- goes on counting), and the epoch names the server history it was issued in: 0 on a
-- cluster's first timeline, so that a database that never failed over issues the very tokens
-- it issued before. The epoch is kept in one row (fence_epoch) with the timeline and system
-- identifier it was read on, and advances the first time a lease is taken on a history that
-- differs:
-- - a promotion or point-in-time restore moves to a higher timeline (PostgreSQL picks one above
--   every timeline in its archive's history): the epoch advances by as much as the timeline,
--   so on every history of one cluster epoch - timeline stays the same, and the branch that
--   was lost (its timeline lower than the new one) can never have issued a token as high;
-- - a different system identifier (pg_dump/restore into a new cluster, pg_upgrade keeps it
--   not) or a lower timeline: the epoch advances by at least 1 from the restored row, so tokens
--   never go backwards;
-- - where the server hides its timeline (a managed service restricting the functions) the
--   epoch stays as it is and `leasejob check` says that a failover cannot be told apart.
-- The token stays a bigint (and below 2^53, exact as a JavaScript number, up to epoch 9006).
-- Tokens of the earlier schema (plain generations, below 10^12: epoch 0) go on counting, and
-- compare lower than every token of a later epoch; a lease live while migrating keeps its
-- token, accepted until it ends. Migrating on timeline T starts at epoch T - 1.
-- assert_lease compares the whole token, so a token of the lost branch is refused on the new
-- primary even where its n matches; the message names both epochs.
-- A lease does not outlive a change of history: renew(), finish() and assert_lease() refuse a
-- token of an earlier epoch than the server's current one (token_current()), so the runner stops
-- its child and the next run redoes the window (the new primary cannot tell what the owner
-- wrote after the standby's last replicated point).
-- Safe to run again (IF NOT EXISTS, CREATE OR REPLACE, ON CONFLICT DO NOTHING).

-- One row: the epoch of this history, and what it was read on.
CREATE TABLE IF NOT EXISTS fence_epoch (
  id           boolean PRIMARY KEY DEFAULT true CHECK (id),
  epoch        bigint NOT NULL CHECK (epoch BETWEEN 0 AND 9223371),
  timeline     bigint,
  system_id    text,
  changed_at   timestamptz NOT NULL DEFAULT now(),
  -- The epoch when 011 was applied: the epoch of the tokens issued before it (below 10^12).
  base_epoch    bigint NOT NULL DEFAULT 0,
  -- What it was before its last change, for `check`: the failover it followed.
  prev_epoch    bigint,
  prev_timeline bigint,
  prev_system_id text
);

-- The server's timeline: the first 8 hex digits of the current WAL file's name (readable
-- without superuser; pg_control_checkpoint() lags a promotion until its next checkpoint).
-- NULL where it cannot be read: a standby (acquire fails there anyway), a managed service.
CREATE OR REPLACE FUNCTION server_timeline() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  RETURN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint;
EXCEPTION WHEN OTHERS THEN
  RETURN NULL;
END $$;

-- The cluster's system identifier (initdb makes it; a base backup and its standbys share it).
CREATE OR REPLACE FUNCTION server_system_id() RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  RETURN (pg_control_system()).system_identifier::text;
EXCEPTION WHEN OTHERS THEN
  RETURN NULL;
END $$;

INSERT INTO fence_epoch (epoch, base_epoch, timeline, system_id)
VALUES (greatest(coalesce(server_timeline(), 1) - 1, 0), greatest(coalesce(server_timeline(), 1) - 1, 0), server_timeline(), server_system_id())
ON CONFLICT (id) DO NOTHING;

-- The next token after `prev` (NULL: the job's first) in `epoch`: n goes on counting; a token
-- of an earlier epoch (or of the schema before 011) moves up into this one.
CREATE OR REPLACE FUNCTION next_token(prev bigint, epoch bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT CASE WHEN prev IS NULL THEN epoch * 1000000000000 + 1
              WHEN prev / 1000000000000 < epoch THEN epoch * 1000000000000 + prev % 1000000000000 + 1
              ELSE prev + 1 END
$$;

-- How far the epoch advances from a row read on (timeline, system_id) to a server now on
-- (p_tl, p_sys): 0 on the same history (or a hidden timeline), the timeline's step on a later
-- branch of the same cluster, else 1.
CREATE OR REPLACE FUNCTION fence_epoch_step(p_timeline bigint, p_system_id text, p_tl bigint, p_sys text) RETURNS bigint
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT CASE WHEN p_tl IS NULL THEN 0
              WHEN p_timeline = p_tl AND (p_sys IS NULL OR p_system_id IS NULL OR p_system_id = p_sys) THEN 0
              WHEN p_timeline IS NOT NULL AND p_tl > p_timeline AND (p_sys IS NULL OR p_system_id IS NULL OR p_system_id = p_sys)
                THEN p_tl - p_timeline
              ELSE 1 END
$$;

-- Whether a token was issued in the server's current history: a lease does not outlive a
-- failover or a restore. The new primary cannot tell what its owner committed on the old one
-- after the standby's last replicated point (its last writes may be gone while its
-- acquisition and renewals are not), so renew(), finish() and assert_lease() treat such a lease
-- as lost: its child is stopped and the next run redoes the window, skipping what was kept.
-- Read only (nothing is advanced here: a child's transaction must not lock fence_epoch).
CREATE OR REPLACE FUNCTION token_current(p_token bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v_row fence_epoch%ROWTYPE;
BEGIN
  SELECT * INTO v_row FROM fence_epoch f;
  IF NOT FOUND THEN RETURN true; END IF;
  RETURN CASE WHEN p_token < 1000000000000 THEN v_row.base_epoch ELSE p_token / 1000000000000 END
         >= v_row.epoch + fence_epoch_step(v_row.timeline, v_row.system_id, server_timeline(), server_system_id());
END $$;

-- The epoch to issue tokens in, advanced first when this server's history is not the one the
-- row was read on (see the top of this file). Advancing is rare (once per promotion, restore
-- or new cluster) and races only with itself: the UPDATE names the epoch it read, and a loser
-- reads the winner's.
CREATE OR REPLACE FUNCTION fence_epoch() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_row fence_epoch%ROWTYPE;
  v_tl bigint := server_timeline();
  v_sys text := server_system_id();
  v_step bigint;
BEGIN
  LOOP
    SELECT * INTO v_row FROM fence_epoch f;
    IF NOT FOUND THEN
      INSERT INTO fence_epoch (epoch, timeline, system_id) VALUES (greatest(coalesce(v_tl, 1) - 1, 0), v_tl, v_sys)
      ON CONFLICT (id) DO NOTHING;
      CONTINUE;
    END IF;
    -- 0: the same history, or nothing to compare with (a hidden timeline hides any failover).
    v_step := fence_epoch_step(v_row.timeline, v_row.system_id, v_tl, v_sys);
    IF v_step = 0 THEN RETURN v_row.epoch; END IF;
    IF v_row.epoch + v_step > 9223371 THEN
      RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
        MESSAGE = format('leasejob: fence epoch %s cannot advance by %s: tokens would not fit a bigint', v_row.epoch, v_step);
    END IF;
    UPDATE fence_epoch f SET epoch = v_row.epoch + v_step, timeline = v_tl, system_id = coalesce(v_sys, f.system_id),
           changed_at = now(), prev_epoch = v_row.epoch, prev_timeline = v_row.timeline, prev_system_id = v_row.system_id
     WHERE f.epoch = v_row.epoch;
    IF FOUND THEN RETURN v_row.epoch + v_step; END IF;
  END LOOP;
END $$;

-- What `check` and the exporter report about the history tokens are issued in.
CREATE OR REPLACE FUNCTION fence_status() RETURNS TABLE (
  epoch bigint, timeline bigint, server_timeline bigint, system_id text, server_system_id text,
  changed_at timestamptz, prev_epoch bigint, prev_timeline bigint
)
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT f.epoch, f.timeline, server_timeline(), f.system_id, server_system_id(), f.changed_at, f.prev_epoch, f.prev_timeline
    FROM fence_epoch f
$$;

-- As in 007, but for the token: marked "011".
CREATE OR REPLACE FUNCTION acquire(
  p_job text, p_owner text, p_ttl_ms integer, p_renew_ms integer,
  p_window text, p_scheduled_at timestamptz, p_rerun boolean, p_max_delay_ms bigint,
  p_host_time timestamptz, p_spec jsonb, p_lock_timeout_ms integer
) RETURNS TABLE (
  outcome text, generation bigint, attempt integer, db_now timestamptz,
  holder text, holder_generation bigint, holder_window text, expires_at timestamptz,
  completed_at timestamptz
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_prev leases%ROWTYPE;
  v_gen bigint;
  v_attempt integer;
  v_done timestamptz;
  v_stale boolean;
  v_session_gone boolean;
  v_epoch bigint; -- 011
BEGIN
  db_now := now();

  -- Lock order: the lease row first (finish() too, whoever holds it), so acquire and finish
  -- of one job serialize there; the job's row (registry, event counter) before the window's
  -- where no lease is taken (the missed path).

  -- A completed window is final (completed_at is only ever set by a lease holder), so a
  -- late duplicate leaves without touching the lease.
  IF p_window IS NOT NULL AND NOT p_rerun THEN
    SELECT w.completed_at INTO v_done FROM windows w WHERE w.job = p_job AND w.window_key = p_window;
    IF v_done IS NOT NULL THEN
      PERFORM register_job(p_job, p_ttl_ms, p_spec);
      outcome := 'done'; completed_at := v_done;
      RETURN NEXT; RETURN;
    END IF;
  END IF;

  IF p_window IS NOT NULL AND p_max_delay_ms IS NOT NULL AND p_scheduled_at IS NOT NULL
     AND now() - p_scheduled_at > make_interval(secs => p_max_delay_ms / 1000.0) THEN
    -- The job's row before the window's, as everywhere.
    PERFORM register_job(p_job, p_ttl_ms, p_spec);
    PERFORM record_event(p_job, 'window-missed', p_window, p_owner, NULL, p_host_time,
      jsonb_build_object('scheduled_at', p_scheduled_at, 'max_delay_ms', p_max_delay_ms));
    INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation, attempts, outcome, finished_at)
    VALUES (p_job, p_window, p_scheduled_at, p_owner, 0, 0, 'missed', now())
    ON CONFLICT (job, window_key) DO NOTHING;
    outcome := 'missed';
    RETURN NEXT; RETURN;
  END IF;

  SELECT * INTO v_prev FROM leases l WHERE l.name = p_job;

  -- A lease that is plainly live is busy: answer from this read, without queueing for the
  -- row lock behind every other contender (the upsert below would lock it to find out).
  IF v_prev.expires_at > now() THEN
    v_gen := NULL;
  ELSE
  -- 011: the fence epoch of this server's history, advanced first if the server was promoted,
  -- restored or replaced since it was last read; the generation issued below is in it.
  v_epoch := fence_epoch();
  -- The upsert locks the row even when its WHERE fails, so it waits behind an open fenced
  -- transaction (FOR SHARE). Bounded: a row locked that long means an owner is working (or
  -- paused mid-transaction); we answer from a plain read below instead of hanging.
  PERFORM set_config('lock_timeout', greatest(p_lock_timeout_ms, 1) || 'ms', true);
  BEGIN
  -- 007: the row as it is once ours to change. The plain read above may predate a finish
  -- that committed while we queued for the lock: that owner released it, it did not lose it.
  SELECT * INTO v_prev FROM leases l WHERE l.name = p_job FOR UPDATE;
  -- Such a finish may have completed our very window: then it is done, and no generation is
  -- spent on it (completion needs the lease row lock, which we now hold).
  IF p_window IS NOT NULL AND NOT p_rerun THEN
    SELECT w.completed_at INTO v_done FROM windows w WHERE w.job = p_job AND w.window_key = p_window;
  END IF;
  IF v_done IS NULL THEN
  INSERT INTO leases AS l (name, owner, generation, acquired_at, renewed_at, expires_at,
                           released_at, ttl_ms, renew_interval_ms, window_key, backend_pid, backend_start)
  VALUES (p_job, p_owner, next_token(NULL, v_epoch), now(), now(), now() + make_interval(secs => p_ttl_ms / 1000.0),
          NULL, p_ttl_ms, p_renew_ms, p_window, pg_backend_pid(),
          (SELECT a.backend_start FROM pg_stat_get_activity(pg_backend_pid()) a))
  ON CONFLICT (name) DO UPDATE SET
    owner = EXCLUDED.owner, generation = next_token(l.generation, v_epoch), acquired_at = now(),
    renewed_at = now(), expires_at = EXCLUDED.expires_at, released_at = NULL,
    ttl_ms = EXCLUDED.ttl_ms, renew_interval_ms = EXCLUDED.renew_interval_ms,
    window_key = EXCLUDED.window_key, backend_pid = EXCLUDED.backend_pid,
    backend_start = EXCLUDED.backend_start
  WHERE l.expires_at <= now()
  RETURNING l.generation INTO v_gen;
  END IF;
  EXCEPTION WHEN lock_not_available THEN
    v_gen := NULL;
  END;
  PERFORM set_config('lock_timeout', '0', true);
  END IF;

  IF v_done IS NOT NULL THEN
    PERFORM register_job(p_job, p_ttl_ms, p_spec);
    outcome := 'done'; completed_at := v_done;
    RETURN NEXT; RETURN;
  END IF;

  PERFORM register_job(p_job, p_ttl_ms, p_spec);

  IF v_gen IS NULL THEN
    -- Busy: describe the holder so the caller can skip, wait, or wait out a stale holder.
    SELECT * INTO v_prev FROM leases l WHERE l.name = p_job;
    holder := v_prev.owner; holder_generation := v_prev.generation;
    holder_window := v_prev.window_key; expires_at := v_prev.expires_at;
    -- Slack of half an interval absorbs a slow renewal round trip.
    v_stale := now() > v_prev.renewed_at + make_interval(secs => v_prev.renew_interval_ms * 1.5 / 1000.0);
    v_session_gone := v_prev.backend_pid IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM pg_stat_get_activity(v_prev.backend_pid) a
       WHERE a.pid = v_prev.backend_pid
         -- backend_start is NULL for another role's session without pg_read_all_stats.
         AND (a.backend_start IS NULL OR a.backend_start = v_prev.backend_start));
    outcome := CASE WHEN v_stale OR v_session_gone THEN 'stale' ELSE 'busy' END;
    RETURN NEXT; RETURN;
  END IF;

  generation := v_gen;
  PERFORM record_event(p_job,
    CASE WHEN v_prev.name IS NOT NULL AND v_prev.released_at IS NULL THEN 'stale-takeover' ELSE 'acquired' END,
    p_window, p_owner, v_gen, p_host_time,
    CASE WHEN v_prev.name IS NOT NULL AND v_prev.released_at IS NULL
         THEN jsonb_build_object('previous_owner', v_prev.owner, 'previous_generation', v_prev.generation,
                                 'previous_expired_at', v_prev.expires_at)
         ELSE '{}'::jsonb END);

  -- 007: the generation taken over lost its lease, whether or not its owner could say so:
  -- its unfinished window is lost (a window it claimed and we claim again is reset below),
  -- and the loss is recorded under its owner and host, once (record_event keeps one per
  -- generation, so a finish that said so first, or comes late, adds nothing). Not when the
  -- previous owner is this very runner: an acquisition whose answer it never got.
  IF v_prev.name IS NOT NULL AND v_prev.released_at IS NULL AND v_prev.owner IS DISTINCT FROM p_owner THEN
    UPDATE windows w SET outcome = 'lost', finished_at = now()
     WHERE w.job = p_job AND w.generation = v_prev.generation AND w.completed_at IS NULL AND w.outcome = 'running';
    PERFORM record_event(p_job, 'lease-lost', v_prev.window_key, v_prev.owner, v_prev.generation, p_host_time,
      jsonb_build_object('recorded_by', 'takeover', 'taken_by', p_owner, 'taken_generation', v_gen));
  END IF;

  IF p_window IS NOT NULL THEN
    INSERT INTO windows AS w (job, window_key, scheduled_at, owner, generation)
    VALUES (p_job, p_window, p_scheduled_at, p_owner, v_gen)
    ON CONFLICT (job, window_key) DO UPDATE SET
      owner = EXCLUDED.owner, generation = EXCLUDED.generation,
      attempts = w.attempts + 1, started_at = now(), finished_at = NULL,
      completed_at = NULL, outcome = 'running', exit_code = NULL,
      scheduled_at = coalesce(w.scheduled_at, EXCLUDED.scheduled_at)
    WHERE w.completed_at IS NULL OR p_rerun
    RETURNING w.attempts INTO v_attempt;

    IF v_attempt IS NULL THEN
      -- Completed between our check and the lease (cannot happen since the check is repeated
      -- under the lease row lock, kept as a guard): give the lease back.
      UPDATE leases l SET expires_at = now(), released_at = now() WHERE l.name = p_job;
      outcome := 'done'; generation := NULL;
      RETURN NEXT; RETURN;
    END IF;
    attempt := v_attempt;
    PERFORM record_event(p_job, 'window-claimed', p_window, p_owner, v_gen, p_host_time,
      jsonb_build_object('attempt', v_attempt, 'scheduled_at', p_scheduled_at, 'rerun', p_rerun));
  ELSE
    attempt := 1;
  END IF;

  outcome := 'acquired';
  RETURN NEXT;
END $$;
-- As in 009: a lease of an earlier history is not renewed (marked "011").
CREATE OR REPLACE FUNCTION renew(
  p_job text, p_owner text, p_generation bigint, p_ttl_ms integer, p_lock_timeout_ms integer
) RETURNS TABLE (db_now timestamptz, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
  RETURN QUERY
  UPDATE leases l
     SET expires_at = now() + make_interval(secs => p_ttl_ms / 1000.0),
         renewed_at = now(),
         backend_pid = pg_backend_pid(),
         backend_start = (SELECT a.backend_start FROM pg_stat_get_activity(pg_backend_pid()) a)
   WHERE l.name = p_job AND l.owner = p_owner AND l.generation = p_generation AND l.expires_at > now()
     AND l.released_at IS NULL
     -- 011: a lease of an earlier history (before a failover or restore) is not renewed.
     AND token_current(l.generation)
  RETURNING now(), l.expires_at;
END $$;

-- As in 008: a lease of an earlier history records no outcome; its window is left for the
-- next run, as a lost lease's is (marked "011").
CREATE OR REPLACE FUNCTION finish(
  p_job text, p_owner text, p_generation bigint, p_window text, p_outcome text,
  p_exit_code integer, p_host_time timestamptz, p_detail jsonb
) RETURNS TABLE (held boolean, db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_lease leases%ROWTYPE;
BEGIN
  db_now := now();
  -- Lock the lease row whoever holds it, first, as acquire() does: a finish that lost its
  -- lease and the new owner's acquire then serialize here instead of deadlocking later on
  -- the window and job rows.
  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR UPDATE;
  held := FOUND AND v_lease.owner = p_owner AND v_lease.generation = p_generation AND v_lease.expires_at > now()
    -- 011: a lease of an earlier history (before a failover or restore) records no outcome.
    AND token_current(p_generation);

  -- A retry after an attempt whose reply was lost: if this generation already released the
  -- lease itself, that attempt committed, whoever has taken the lease since (008). Answer as
  -- it did and change nothing. One probe of events_released, on this path only.
  IF NOT held
     AND EXISTS (SELECT 1 FROM events e WHERE e.job = p_job AND e.generation = p_generation
                  AND e.kind = 'released' AND e.owner = p_owner
                  AND e.detail->>'by' IS NULL) THEN -- not `leasejob release` (by admin)
    held := true;
    RETURN NEXT;
    RETURN;
  END IF;

  IF held AND p_window IS NOT NULL AND p_outcome IN ('completed', 'failed') THEN
    UPDATE windows w SET
      outcome = p_outcome, exit_code = p_exit_code, finished_at = now(),
      completed_at = CASE WHEN p_outcome = 'completed' THEN now() ELSE NULL END
     WHERE w.job = p_job AND w.window_key = p_window AND w.generation = p_generation;
    PERFORM record_event(p_job, 'window-' || p_outcome, p_window, p_owner, p_generation,
      p_host_time, jsonb_strip_nulls(jsonb_build_object('exit_code', p_exit_code, 'attempt', p_detail->'attempt',
        'duration_ms', p_detail->'duration_ms', 'aborted', p_detail->'aborted')));
  END IF;

  IF p_detail ? 'offset_ms' THEN
    INSERT INTO hosts AS h (host, offset_ms, uncertainty_ms)
    VALUES (coalesce(nullif(split_part(p_owner, ':', 1), ''), 'unknown'),
            (p_detail->>'offset_ms')::integer, (p_detail->>'uncertainty_ms')::integer)
    ON CONFLICT (host) DO UPDATE SET offset_ms = EXCLUDED.offset_ms,
      uncertainty_ms = EXCLUDED.uncertainty_ms, measured_at = now();
    IF (p_detail->>'offset_large')::boolean THEN
      PERFORM record_event(p_job, 'clock-offset', p_window, p_owner, p_generation, p_host_time,
        jsonb_build_object('offset_ms', p_detail->'offset_ms', 'uncertainty_ms', p_detail->'uncertainty_ms'));
    END IF;
  END IF;

  IF held THEN
    UPDATE leases l SET expires_at = now(), released_at = now()
     WHERE l.name = p_job AND l.generation = p_generation;
    PERFORM record_event(p_job, 'released', p_window, p_owner, p_generation, p_host_time,
      jsonb_strip_nulls(jsonb_build_object('offset_ms', p_detail->'offset_ms', 'uncertainty_ms', p_detail->'uncertainty_ms')));
  ELSE
    -- Lost before we could finish: the window stays open for whoever holds the lease now.
    UPDATE windows w SET outcome = 'lost', finished_at = now()
     WHERE w.job = p_job AND w.window_key = p_window AND w.generation = p_generation
       AND w.completed_at IS NULL;
    PERFORM record_event(p_job, 'lease-lost', p_window, p_owner, p_generation, p_host_time,
      jsonb_strip_nulls(jsonb_build_object('outcome', p_outcome, 'aborted', p_detail->'aborted')));
  END IF;
  RETURN NEXT;
END $$;

-- As in 002, and a token of an earlier history is refused; the reason names the epochs when
-- they differ (marked "011").
CREATE OR REPLACE FUNCTION assert_lease(p_job text, p_token bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_lease leases%ROWTYPE;
  v_now timestamptz;
  v_state text;
  v_reason text;
  v_hint text;
BEGIN
  IF p_job IS NULL OR p_token IS NULL THEN
    RAISE EXCEPTION USING
      ERRCODE = 'null_value_not_allowed',
      MESSAGE = format('leasejob: assert_lease(job, token) needs both arguments, got job %s and token %s',
                       coalesce(quote_literal(p_job), 'NULL'), coalesce(p_token::text, 'NULL')),
      HINT = 'Pass LEASEJOB_NAME and FENCE_TOKEN from the environment that leasejob run gives the child.';
  END IF;

  SELECT * INTO v_lease FROM leases l WHERE l.name = p_job FOR SHARE;
  -- Read after the lock: the wait may have been long.
  v_now := clock_timestamp();

  IF NOT FOUND THEN
    v_state := 'unknown-job';
    v_reason := format('unknown job, no lease was ever taken (token %s)', p_token);
    v_hint := 'Check LEASEJOB_NAME and that the child uses the same schema as the runner (LEASEJOB_SCHEMA).';
  ELSIF p_token < v_lease.generation THEN
    v_state := 'stale';
    v_reason := format('token %s is stale, current generation %s', p_token, v_lease.generation);
    v_hint := 'Another run took the lease over: stop writing and exit; do not retry with this token.';
  ELSIF p_token > v_lease.generation THEN
    v_state := 'never-issued';
    v_reason := format('token %s was never issued, current generation %s', p_token, v_lease.generation);
    v_hint := 'Pass FENCE_TOKEN exactly as leasejob run gave it, with the same schema (LEASEJOB_SCHEMA).';
  ELSIF v_lease.expires_at <= v_now THEN
    v_state := CASE WHEN v_lease.released_at IS NOT NULL THEN 'released' ELSE 'expired' END;
    v_reason := format('lease %s at %s (token %s is the current generation)', v_state,
      to_char(coalesce(v_lease.released_at, v_lease.expires_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
      p_token);
    v_hint := 'The lease is no longer held (the runner is stopping this child, or it already finished): stop writing and exit.';
  ELSIF NOT token_current(p_token) THEN
    -- 011: the lease is of an earlier history of the database (before a failover or restore).
    v_state := 'other-history';
    v_reason := format('token %s was issued before the database failed over or was restored (fence epoch %s): the lease does not outlive it',
      p_token, CASE WHEN p_token < 1000000000000 THEN (SELECT f.base_epoch FROM fence_epoch f) ELSE p_token / 1000000000000 END);
    v_hint := 'What this run wrote just before the failover may be lost: stop and exit; the next run redoes the window, skipping what was kept.';
  ELSE
    RETURN;
  END IF;

  -- 011: a token of another epoch was issued on another history of the database: before a
  -- failover or restore (stale), or on a branch the promotion lost (never issued here).
  IF v_lease.generation IS NOT NULL AND p_token / 1000000000000 <> v_lease.generation / 1000000000000 THEN
    v_reason := v_reason || format(' (token of fence epoch %s, the lease is at epoch %s: the database failed over or was restored in between)',
      p_token / 1000000000000, v_lease.generation / 1000000000000);
  END IF;

  RAISE EXCEPTION USING
    ERRCODE = 'LJ001',
    MESSAGE = format('leasejob: fence refused for job %s: %s', to_json(p_job)::text, v_reason),
    DETAIL = format('state=%s token=%s generation=%s owner=%s expires_at=%s',
      v_state, p_token, coalesce(v_lease.generation::text, 'none'), coalesce(v_lease.owner, 'none'),
      coalesce(to_char(v_lease.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), 'none')),
    HINT = v_hint;
END $$;
-- New functions are executable by PUBLIC by default; only granted roles may call ours. The
-- roles an earlier `migrate --grant-to` made runners (EXECUTE on acquire) read the fence
-- status as they read the rest (check, the exporter).
DO $$
DECLARE
  r record;
BEGIN
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', current_schema());
  FOR r IN
    SELECT DISTINCT a.grantee::regrole::text AS role
      FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a
     WHERE p.oid = 'acquire(text, text, integer, integer, text, timestamptz, boolean, bigint, timestamptz, jsonb, integer)'::regprocedure
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
  LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION fence_status() TO %s', r.role);
    EXECUTE format('GRANT SELECT ON fence_epoch TO %s', r.role);
  END LOOP;
END $$;
