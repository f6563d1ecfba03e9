-- renew(): extend the lease, only for the current owner and generation, before expiry and never
-- once released (the current definition). Returns no row when the lease is gone. The lock
-- timeout keeps a long fenced transaction (FOR SHARE on this row) from hanging the renewal
-- silently: it fails with 55P03 and the runner logs it.
-- A lease of an earlier history of the database (a failover, a restore) is not renewed (011).
-- 035: each renewal counts (renewals): a contender that doubts the database clock watches the
-- counter, not a timestamp, to see whether the holder still renews.
CREATE OR REPLACE FUNCTION renew(
  p_job text, p_owner text, p_generation bigint, p_ttl_ms integer, p_lock_timeout_ms integer
) RETURNS TABLE (db_now timestamptz, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  PERFORM durable_commit(); -- 021: its commit survives a crash, whatever synchronous_commit says
  PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
  RETURN QUERY
  UPDATE leases l
     SET expires_at = now() + make_interval(secs => p_ttl_ms / 1000.0),
         renewed_at = now(),
         renewals = l.renewals + 1,
         backend_pid = pg_backend_pid(),
         backend_start = (SELECT a.backend_start FROM pg_stat_get_activity(pg_backend_pid()) a)
   WHERE l.name = p_job AND l.owner = p_owner AND l.generation = p_generation AND l.expires_at > now()
     AND l.released_at IS NULL
     -- 011: a lease of an earlier history (before a failover or restore) is not renewed.
     AND token_current(l.generation)
  RETURNING now(), l.expires_at;
END $$;
