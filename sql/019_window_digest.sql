-- 019: status, check and the exporter judge every due occurrence of every job (issue 20); until
-- now each read went through the windows table's index for each job, so their cost grew with the
-- history kept (issue 24: 1.24-1.38x at 2 million windows). window_digest keeps, per job, the
-- newest final windows (at most 48, trimmed to 32) with their times, the time below which it is
-- no longer complete (floor_ms), and the latest completion. Triggers on windows keep it in step
-- with every writer, including a hand edit and prune's deletes, so the readers answer from it
-- alone when a job's due windows are later than its floor, and from the ledger as before when
-- they are not (or the job has no digest). What status, check and the exporter report does not
-- change. The digest is filled from the ledger once here: one pass over the final windows,
-- while the triggers' lock keeps writers out (a few seconds for millions; see docs/performance.md).
-- Functions: rebuild_window_digest, window_digest_forget, window_digest_note, each its whole
-- current definition from sql/functions/. Written to be applied again over itself, as every
-- migration here is (IF NOT EXISTS, triggers dropped and made again).

CREATE TABLE IF NOT EXISTS window_digest (
  job               text PRIMARY KEY,
  -- {window_key: scheduled_at in epoch ms}: every final window of the job scheduled later than
  -- floor_ms, and perhaps some earlier.
  finals            jsonb NOT NULL DEFAULT '{}'::jsonb,
  floor_ms          float8 NOT NULL DEFAULT '-Infinity',
  -- {window_key: completed_at in epoch ms}: final windows without a scheduled time (`mark`),
  -- at most 64; marks_full when there were more.
  marks             jsonb NOT NULL DEFAULT '{}'::jsonb,
  marks_full        boolean NOT NULL DEFAULT false,
  last_window       text,
  last_completed_at timestamptz,
  last_started_at   timestamptz,
  last_generation   bigint
);

-- rebuild_window_digest: as in sql/functions/rebuild_window_digest.sql
CREATE OR REPLACE FUNCTION rebuild_window_digest(p_job text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v_jobs bigint;
BEGIN
  DELETE FROM window_digest d WHERE p_job IS NULL OR d.job = p_job;
  INSERT INTO window_digest (job, finals, floor_ms, marks, marks_full,
                             last_window, last_completed_at, last_started_at, last_generation)
  SELECT r.job,
         coalesce(jsonb_object_agg(r.window_key, r.at) FILTER (WHERE r.scheduled AND r.rank <= 32), '{}'::jsonb),
         coalesce(max(r.at) FILTER (WHERE r.scheduled AND r.rank > 32), '-Infinity'::float8),
         coalesce(jsonb_object_agg(r.window_key, r.at) FILTER (WHERE NOT r.scheduled AND r.rank <= 64), '{}'::jsonb),
         count(*) FILTER (WHERE NOT r.scheduled AND r.rank > 64) > 0,
         (array_agg(r.window_key ORDER BY r.completed_at DESC, r.generation DESC))[1],
         max(r.completed_at),
         (array_agg(r.started_at ORDER BY r.completed_at DESC, r.generation DESC))[1],
         (array_agg(r.generation ORDER BY r.completed_at DESC, r.generation DESC))[1]
    FROM (SELECT w.job, w.window_key, w.completed_at, w.started_at, w.generation, w.scheduled_at IS NOT NULL AS scheduled,
                 round(date_part('epoch', coalesce(w.scheduled_at, w.completed_at)) * 1000) AS at,
                 row_number() OVER (PARTITION BY w.job, w.scheduled_at IS NOT NULL
                                    ORDER BY coalesce(w.scheduled_at, w.completed_at) DESC, w.window_key DESC) AS rank
            FROM windows w
           WHERE w.completed_at IS NOT NULL AND (p_job IS NULL OR w.job = p_job)) r
   GROUP BY r.job;
  GET DIAGNOSTICS v_jobs = ROW_COUNT;
  RETURN v_jobs;
END $$;

-- window_digest_forget: as in sql/functions/window_digest_forget.sql
CREATE OR REPLACE FUNCTION window_digest_forget() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT o.job, array_agg(o.window_key) AS keys FROM gone o WHERE o.completed_at IS NOT NULL GROUP BY o.job LOOP
    UPDATE window_digest d SET
      finals = d.finals - r.keys,
      marks = d.marks - r.keys
     WHERE d.job = r.job AND (d.finals ?| r.keys OR d.marks ?| r.keys);
    UPDATE window_digest d SET (last_window, last_completed_at, last_started_at, last_generation) = (
        SELECT w.window_key, w.completed_at, w.started_at, w.generation FROM windows w
         WHERE w.job = r.job AND w.completed_at IS NOT NULL
         ORDER BY w.completed_at DESC, w.generation DESC LIMIT 1)
     WHERE d.job = r.job AND d.last_window = ANY(r.keys);
  END LOOP;
  RETURN NULL;
END $$;

-- window_digest_note: as in sql/functions/window_digest_note.sql
CREATE OR REPLACE FUNCTION window_digest_note() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v_scheduled boolean := NEW.scheduled_at IS NOT NULL;
  v_entry jsonb;
  v_n integer;
BEGIN
  IF NEW.completed_at IS NOT NULL THEN
    v_entry := jsonb_build_object(NEW.window_key,
      round(date_part('epoch', coalesce(NEW.scheduled_at, NEW.completed_at)) * 1000));
    INSERT INTO window_digest AS d (job, finals, marks, last_window, last_completed_at, last_started_at, last_generation)
    VALUES (NEW.job, CASE WHEN v_scheduled THEN v_entry ELSE '{}'::jsonb END, CASE WHEN v_scheduled THEN '{}'::jsonb ELSE v_entry END,
            NEW.window_key, NEW.completed_at, NEW.started_at, NEW.generation)
    ON CONFLICT (job) DO UPDATE SET
      finals = CASE WHEN v_scheduled THEN d.finals || v_entry ELSE d.finals - NEW.window_key END,
      marks = CASE WHEN v_scheduled THEN d.marks - NEW.window_key
                   WHEN d.marks ? NEW.window_key OR (SELECT count(*) FROM jsonb_object_keys(d.marks)) < 64
                   THEN d.marks || v_entry ELSE d.marks END,
      marks_full = d.marks_full OR (NOT v_scheduled AND NOT d.marks ? NEW.window_key
                                    AND (SELECT count(*) FROM jsonb_object_keys(d.marks)) >= 64),
      -- The latest completion as the readers ordered it: completed_at, then generation.
      last_window = CASE WHEN d.last_completed_at IS NULL
                              OR (NEW.completed_at, NEW.generation) >= (d.last_completed_at, d.last_generation)
                         THEN NEW.window_key ELSE d.last_window END,
      last_started_at = CASE WHEN d.last_completed_at IS NULL
                              OR (NEW.completed_at, NEW.generation) >= (d.last_completed_at, d.last_generation)
                         THEN NEW.started_at ELSE d.last_started_at END,
      last_generation = CASE WHEN d.last_completed_at IS NULL
                              OR (NEW.completed_at, NEW.generation) >= (d.last_completed_at, d.last_generation)
                         THEN NEW.generation ELSE d.last_generation END,
      last_completed_at = greatest(d.last_completed_at, NEW.completed_at)
    RETURNING (SELECT count(*) FROM jsonb_object_keys(d.finals)) INTO v_n;
    IF v_n > 48 THEN
      -- Trimmed in a batch, not at every completion: one statement in sixteen.
      WITH gone AS (
        SELECT e.key, e.value::float8 AS at
          FROM window_digest d2, jsonb_each(d2.finals) e
         WHERE d2.job = NEW.job
         ORDER BY e.value::float8 DESC, e.key DESC OFFSET 32)
      UPDATE window_digest d SET
        finals = d.finals - ARRAY(SELECT g.key FROM gone g),
        floor_ms = greatest(d.floor_ms, (SELECT max(g.at) FROM gone g))
       WHERE d.job = NEW.job;
    END IF;
  ELSIF TG_OP = 'UPDATE' AND OLD.completed_at IS NOT NULL THEN
    UPDATE window_digest d SET finals = d.finals - NEW.window_key, marks = d.marks - NEW.window_key
     WHERE d.job = NEW.job AND (d.finals ? NEW.window_key OR d.marks ? NEW.window_key);
    UPDATE window_digest d SET (last_window, last_completed_at, last_started_at, last_generation) = (
        SELECT w.window_key, w.completed_at, w.started_at, w.generation FROM windows w
         WHERE w.job = NEW.job AND w.completed_at IS NOT NULL
         ORDER BY w.completed_at DESC, w.generation DESC LIMIT 1)
     WHERE d.job = NEW.job AND d.last_window = NEW.window_key;
  END IF;
  RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS windows_digest_insert ON windows;
CREATE TRIGGER windows_digest_insert AFTER INSERT ON windows
  FOR EACH ROW WHEN (NEW.completed_at IS NOT NULL) EXECUTE FUNCTION window_digest_note();
DROP TRIGGER IF EXISTS windows_digest_update ON windows;
CREATE TRIGGER windows_digest_update AFTER UPDATE OF completed_at ON windows
  FOR EACH ROW WHEN (OLD.completed_at IS DISTINCT FROM NEW.completed_at) EXECUTE FUNCTION window_digest_note();
DROP TRIGGER IF EXISTS windows_digest_delete ON windows;
CREATE TRIGGER windows_digest_delete AFTER DELETE ON windows
  REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION window_digest_forget();

-- New: rebuild_window_digest, window_digest_forget, window_digest_note. Not executable by
-- PUBLIC; executable by every role already given the others (the runner roles of `migrate
-- --grant-to`), as for every leasejob function, and those roles read the digest as they read the
-- rest (status, check, the exporter).
DO $$
DECLARE r record;
BEGIN
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', current_schema());
  FOR r IN SELECT DISTINCT a.grantee::regrole::text AS role FROM pg_proc p, aclexplode(p.proacl) a
            WHERE p.pronamespace = current_schema()::regnamespace AND p.proname = 'acquire'
              AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner LOOP
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %I TO %s', current_schema(), r.role);
    EXECUTE format('GRANT SELECT ON window_digest TO %s', r.role);
  END LOOP;
END $$;

SELECT rebuild_window_digest();
