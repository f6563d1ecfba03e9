-- server_timeline(): the server's timeline, from the current WAL file's name (readable without
-- superuser); NULL where it cannot be read (a standby, a managed service restricting it).
CREATE OR REPLACE FUNCTION server_timeline() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  RETURN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint;
EXCEPTION WHEN OTHERS THEN
  RETURN NULL;
END $$;
