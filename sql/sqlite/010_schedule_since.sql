-- Embedded store (SQLite), version 10: when the job's current schedule took effect (as
-- sql/028_schedule_change_effective.sql for PostgreSQL): set on the store clock, in
-- milliseconds, by the run whose registration adopted a change of schedule, zone, window mode,
-- format or offset. An occurrence of the schedule before it that no run claimed was never due
-- (docs/occurrence.md). NULL for a job registered before this version: its created_at stands.
ALTER TABLE jobs ADD COLUMN schedule_since INTEGER;
