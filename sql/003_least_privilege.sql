-- 003: least privilege. The functions run with their owner's rights (SECURITY DEFINER), so a
-- runner role needs only EXECUTE on them (and SELECT for status/check/exporter): it can
-- neither write the tables directly nor drop or truncate them, and a child's role can call
-- assert_lease without UPDATE on leases. `leasejob migrate --grant-to <role>` grants that.
--
-- SECURITY DEFINER is safe here because every function runs fixed, parameterized SQL and its
-- search_path is pinned to this schema, pg_catalog, then pg_temp (the migrator sets it so;
-- pg_temp last means a caller's temporary objects can never shadow ours).

ALTER FUNCTION record_event(text, text, text, text, bigint, timestamptz, jsonb)
  SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION register_job(text, integer, jsonb)
  SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION acquire(text, text, integer, integer, text, timestamptz, boolean, bigint, timestamptz, jsonb, integer)
  SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION renew(text, text, bigint, integer, integer)
  SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION finish(text, text, bigint, text, text, integer, timestamptz, jsonb)
  SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION assert_lease(text, bigint)
  SECURITY DEFINER SET search_path FROM CURRENT;

-- Functions are executable by PUBLIC by default; only granted roles may call ours.
DO $$
BEGIN
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', current_schema());
END $$;
