-- 015: --record-output. The last bytes a window's child wrote (stdout and stderr in arrival
-- order) are kept with the window, for the attempt that wrote them, so that `history` and the
-- status page show why a run failed. A new function, so `finish` is unchanged: the runner
-- records the tail just before it finishes, while it still holds the lease. bytea: the child's
-- output may be any bytes. Safe to apply again (IF NOT EXISTS, OR REPLACE).
-- Functions: record_output, each its whole current definition from sql/functions/.
-- CREATE OR REPLACE keeps the privileges granted on a function of the same signature;
-- SECURITY DEFINER and the pinned search_path are restated, as CREATE OR REPLACE resets them.

ALTER TABLE windows
  ADD COLUMN IF NOT EXISTS output_tail       bytea,
  ADD COLUMN IF NOT EXISTS output_bytes      bigint,
  ADD COLUMN IF NOT EXISTS output_generation bigint,
  ADD COLUMN IF NOT EXISTS output_attempt    integer,
  ADD COLUMN IF NOT EXISTS output_at         timestamptz;

-- record_output: as in sql/functions/record_output.sql
CREATE OR REPLACE FUNCTION record_output(
  p_job text, p_window text, p_generation bigint, p_tail bytea, p_bytes bigint
) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  UPDATE windows w
     SET output_tail = p_tail, output_bytes = p_bytes, output_generation = p_generation,
         output_attempt = w.attempts, output_at = now()
   WHERE w.job = p_job AND w.window_key = p_window AND w.generation = p_generation;
  RETURN FOUND;
END $$;

-- New: record_output. Not executable by PUBLIC; executable by every role already given the
-- others (the runner roles of `migrate --grant-to`), as for every leasejob function.
DO $$
DECLARE r record;
BEGIN
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', current_schema());
  FOR r IN SELECT DISTINCT a.grantee::regrole::text AS role FROM pg_proc p, aclexplode(p.proacl) a
            WHERE p.pronamespace = current_schema()::regnamespace AND p.proname = 'acquire'
              AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner LOOP
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %I TO %s', current_schema(), r.role);
  END LOOP;
END $$;
