-- Embedded store (SQLite), version 6: `run --expect-duration <min>..<max>`, the bounds a job's
-- runs are expected to take (as sql/023_expect_duration_marks_ahead.sql for PostgreSQL); NULL: no bound.
ALTER TABLE jobs ADD COLUMN expect_min_ms INTEGER;
ALTER TABLE jobs ADD COLUMN expect_max_ms INTEGER;
