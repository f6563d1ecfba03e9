-- Embedded store (SQLite), version 2, as sql/012_versions_pause_mark.sql for PostgreSQL: the job
-- record's version (bumped by registry changes, pause, resume, mark, administrative release),
-- its pause ([paused_at, paused_until) in store-clock milliseconds; paused_until NULL: until
-- resumed), and the index `check` counts recent job-changed events by. A leasejob that knows
-- only version 1 refuses a file at version 2: it would run a paused job.
ALTER TABLE jobs ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN paused_at INTEGER;
ALTER TABLE jobs ADD COLUMN paused_until INTEGER;
ALTER TABLE jobs ADD COLUMN pause_reason TEXT;
ALTER TABLE jobs ADD COLUMN paused_by TEXT;
CREATE INDEX events_job_changed ON events (job, db_time) WHERE kind = 'job-changed';
