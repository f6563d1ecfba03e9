-- assert_lease(job, token): the fence a child calls first in each of its own write transactions,
-- so a paused owner cannot write after another run took the lease over (the current definition).
--
--   BEGIN;
--   SELECT leasejob.assert_lease($LEASEJOB_NAME, $FENCE_TOKEN);
--   INSERT ... ON CONFLICT DO NOTHING;   -- the protected write
--   COMMIT;
--
-- It locks the lease row FOR SHARE until the caller's transaction ends. A takeover
-- (acquire's INSERT ... ON CONFLICT DO UPDATE) and a renewal both UPDATE that row, so they
-- wait until the fenced transaction commits or rolls back: either the check sees the old
-- generation gone and refuses, or the write commits before any new owner exists.
-- FOR KEY SHARE would not do: it does not conflict with an UPDATE that leaves the key alone.
--
-- Errors (documented in docs/fencing.md):
--   LJ001  fence refused: the token is not the live generation (stale, or never issued), the
--          lease expired or was released, or the job has no lease row. Class "LJ" is ours:
--          PostgreSQL uses 00-58, F0, HV, P0 and XX. The message names the job, the token, the
--          current generation and the state; DETAIL repeats them; HINT says what to do.
--          The caller must stop writing (a child should exit 75, as leasejob does on a lost
--          lease) and must not retry with the same token: it can never become valid again.
--   22004  null_value_not_allowed: job or token is NULL. That is a bug in the caller (e.g.
--          FENCE_TOKEN not passed through), not a lease state, so it gets PostgreSQL's own
--          code: a child that maps LJ001 to "lost the lease, exit quietly" must not hide it.
--          The write is refused all the same.
--
-- Expiry is compared with clock_timestamp(), not now(): now() is the start of the caller's
-- transaction, which may be long before the check. Once the row is locked no takeover can
-- happen until the caller commits, so expiry passing later in the transaction cannot let a
-- second owner in; the runner, which cannot renew meanwhile, will stop the child.
--
-- Isolation: meant for READ COMMITTED, where a lock that waited re-reads the newest row.
-- Under REPEATABLE READ or SERIALIZABLE a renewal or takeover committed after the caller's
-- snapshot makes the lock fail with 40001; call assert_lease as the first statement and retry.
--
-- No event is recorded here: a fence-refused event written in the caller's transaction would
-- be rolled back together with the refused write (the RAISE aborts it), and the runner never
-- sees the refusal. The caller records it after its ROLLBACK, in a transaction of its own,
-- with record_event(job, 'fence-refused', window, owner, token, now(), detail), as
-- examples/node-fenced-worker.mjs does (best effort: a refusal must not fail on a log write).
--
-- Privileges: SECURITY DEFINER (as every leasejob function, since 003_least_privilege.sql), so
-- the caller needs USAGE on the schema and EXECUTE on this function only; `leasejob migrate
-- --grant-to <role>` grants both. The row lock still belongs to the caller's transaction.
--
-- The token is compared whole (epoch * 10^12 + n), so a token of a branch a failover lost is
-- refused even where its n matches; the message names both epochs when they differ.
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
