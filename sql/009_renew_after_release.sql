-- 009: renew() never extends a released lease. A renewal whose transaction began before its
-- owner's finish() (a renewal still in flight as the child ended, on the runner's other
-- connection) queued for the lease row behind that finish; once the finish committed, the row
-- was checked again against the renewal's own now(), older than the finish's, so the
-- `expires_at > now()` test still passed and the released lease was live again until a TTL
-- later: the next run waited it out (its session gone: a "stale" owner) instead of taking it
-- at once. A released lease now stays released. Same signature, so the privileges granted on
-- it are kept; SECURITY DEFINER and the pinned search_path are restated, as CREATE OR REPLACE
-- resets them. Otherwise as in 006.

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
  RETURNING now(), l.expires_at;
END $$;
