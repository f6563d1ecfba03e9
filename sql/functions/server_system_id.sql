-- server_system_id(): the cluster's system identifier (initdb makes it; base backups and
-- standbys share it); NULL where it cannot be read.
CREATE OR REPLACE FUNCTION server_system_id() RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  RETURN (pg_control_system()).system_identifier::text;
EXCEPTION WHEN OTHERS THEN
  RETURN NULL;
END $$;
