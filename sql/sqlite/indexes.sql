-- Embedded store (SQLite): indexes created on every open when missing, without a version step, so
-- a file opened by this leasejob still opens with an older one (a rollback keeps working).
-- windows_last_completed: the last completed window of a job straight from an index (without it,
-- status read and sorted every window a job ever had). events_released: a finish retry's probe
-- for its own earlier release. events_skips: occurrences a run skipped that have no ledger row,
-- counted by reason (status --json, the exporter) without reading every event. events_window_failed:
-- an occurrence's failed attempts, which run's default budget counts. Only indexes
-- belong here; anything else is a numbered file.
CREATE INDEX IF NOT EXISTS windows_last_completed ON windows (job, completed_at DESC, generation DESC) WHERE completed_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_released ON events (job, generation) WHERE kind = 'released';
CREATE INDEX IF NOT EXISTS events_skips ON events (db_time) WHERE kind IN ('busy-skip', 'replaced-skip', 'backoff-skip', 'paused-skip', 'exhausted-skip');
CREATE INDEX IF NOT EXISTS events_window_failed ON events (job, window_key) WHERE kind = 'window-failed';
