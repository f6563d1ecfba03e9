-- durable_commit(): the calling transaction's commit waits for its WAL to reach the server's disk
-- even where synchronous_commit is off (server, database or role): a lease acquired, a window
-- claimed or completed, a pause acknowledged is not lost with unflushed WAL in a crash after
-- the caller was told (021). 'local' is all that needs (a setting of local, on, remote_write or
-- remote_apply is kept). Until the end of the transaction (set_config(..., true)).
CREATE OR REPLACE FUNCTION durable_commit() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  IF current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'local', true);
  END IF;
END $$;
