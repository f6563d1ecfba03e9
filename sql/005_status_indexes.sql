-- 005: the last completed window of a job straight from an index. status, check and the
-- exporter ask for it per job, ordered by completed_at DESC, generation DESC (windows
-- completed in the same instant order by generation); the index of 001 stopped at
-- completed_at, so every job's lookup sorted its completed windows again. Same prefix, so
-- whatever used the old index uses this one.
-- A plain CREATE INDEX: migrations run in one transaction, where CONCURRENTLY is not allowed.
-- Writes to windows wait while it builds (about a second per million windows).

CREATE INDEX windows_last_completed ON windows (job, completed_at DESC, generation DESC) WHERE completed_at IS NOT NULL;
DROP INDEX IF EXISTS windows_completed;
