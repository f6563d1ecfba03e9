-- renew_measured(): renew() (035), recording the holder's clock offset with the renewal (database
-- clock minus its host's wall clock, ms, from its latest round trip, and that measurement's
-- uncertainty, half its round trip): contenders compare theirs with it (two_clock_confirmed()).
-- Always one row: renewed=false when the lease is no longer this generation's, with the database
-- clock's now(), so that the holder can tell a clock that stepped past its lease from a takeover.
CREATE OR REPLACE FUNCTION renew_measured(
  p_job text, p_owner text, p_generation bigint, p_ttl_ms integer, p_lock_timeout_ms integer,
  p_offset_ms integer, p_uncertainty_ms integer
) RETURNS TABLE (renewed boolean, db_now timestamptz, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  SELECT r.db_now, r.expires_at INTO db_now, expires_at
    FROM renew(p_job, p_owner, p_generation, p_ttl_ms, p_lock_timeout_ms) r;
  renewed := FOUND;
  IF renewed AND p_offset_ms IS NOT NULL THEN
    UPDATE leases l SET holder_offset_ms = p_offset_ms, holder_uncertainty_ms = greatest(p_uncertainty_ms, 0)
     WHERE l.name = p_job AND l.generation = p_generation;
  END IF;
  db_now := coalesce(db_now, now());
  RETURN NEXT;
END $$;
