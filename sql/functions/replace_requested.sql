-- replace_requested(): the window of the run that asked this generation's holder to stop
-- (request_replace, 025), or NULL. Asked in the renewal's own statement, so it costs no round trip.
CREATE OR REPLACE FUNCTION replace_requested(p_job text, p_generation bigint) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT l.replace_window FROM leases l WHERE l.name = p_job AND l.replace_generation = p_generation;
$$;
