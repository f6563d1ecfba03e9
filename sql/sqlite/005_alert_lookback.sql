-- Embedded store (SQLite), version 5: `run --alert-lookback`, how far back status, check and the
-- exporter judge a job's due occurrences (as sql/010_alert_lookback.sql for PostgreSQL).
ALTER TABLE jobs ADD COLUMN alert_lookback_ms INTEGER;
