-- Embedded store (SQLite), version 3: retention (`leasejob prune`), as sql/014_retention.sql.
-- retention: per job, the horizon (epoch ms) before which an occurrence is missed, never run
-- again (its window may be gone), and what was pruned (events 1..pruned_through_seq, windows).
-- (An older leasejob refuses a file at this version: it knows the versions before it only.)
CREATE TABLE retention (
  job TEXT PRIMARY KEY, retained_from INTEGER, pruned_through_seq INTEGER NOT NULL DEFAULT 0,
  pruned_windows INTEGER NOT NULL DEFAULT 0, pruned_at INTEGER);
CREATE INDEX windows_scheduled ON windows (job, scheduled_at);
