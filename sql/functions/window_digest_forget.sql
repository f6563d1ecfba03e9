-- window_digest_forget(): the statement trigger (019) that takes deleted windows out of
-- window_digest: prune's batches, or a hand delete. One pass per job the statement deleted from
-- (prune's batches are of one job), each an update of that job's row by its key, so a batch
-- of thousands costs one update, not one per row or a scan of the digest. Prune keeps each
-- job's latest completion; when a hand delete removes it, the latest is found again in the
-- ledger.
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
