-- window_digest_forget(): the statement trigger (019) that takes deleted windows out of
-- window_digest: prune's batches, or a hand delete. Set-based over the statement's deleted rows,
-- so a batch of thousands costs one update per job, not one per row. Prune keeps each job's
-- latest completion; when a hand delete removes it, the latest is found again in the ledger.
CREATE OR REPLACE FUNCTION window_digest_forget() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  UPDATE window_digest d SET
    finals = d.finals - g.keys,
    marks = d.marks - g.keys,
    n = d.n - (SELECT count(*) FROM unnest(g.keys) k WHERE d.finals ? k)
    FROM (SELECT o.job, array_agg(o.window_key) AS keys FROM gone o WHERE o.completed_at IS NOT NULL GROUP BY o.job) g
   WHERE d.job = g.job AND (d.finals ?| g.keys OR d.marks ?| g.keys);
  UPDATE window_digest d SET (last_window, last_completed_at, last_started_at, last_generation) = (
      SELECT w.window_key, w.completed_at, w.started_at, w.generation FROM windows w
       WHERE w.job = d.job AND w.completed_at IS NOT NULL
       ORDER BY w.completed_at DESC, w.generation DESC LIMIT 1)
   WHERE EXISTS (SELECT 1 FROM gone o WHERE o.job = d.job AND o.window_key = d.last_window);
  RETURN NULL;
END $$;
