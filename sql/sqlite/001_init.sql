-- Embedded store (SQLite), version 1: the tables of one host's ledger, as the PostgreSQL schema's
-- (sql/001_init.sql and later) but with times in epoch milliseconds and lease expiry on the
-- host's monotonic clock plus its boot id. Applied once, by PRAGMA user_version, when a state file
-- is opened; frozen once released: change the schema in the next numbered file.
CREATE TABLE jobs (
  name TEXT PRIMARY KEY, schedule TEXT, tz TEXT, window_mode TEXT, window_format TEXT, window_offset TEXT,
  ttl_ms INTEGER, max_delay_ms INTEGER, alert_after_ms INTEGER, last_seq INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE TABLE leases (
  name TEXT PRIMARY KEY, owner TEXT NOT NULL, generation INTEGER NOT NULL,
  acquired_at INTEGER NOT NULL, renewed_at INTEGER NOT NULL, released_at INTEGER,
  renewed_mono INTEGER NOT NULL, expires_mono INTEGER NOT NULL, boot_id TEXT NOT NULL,
  ttl_ms INTEGER NOT NULL, renew_interval_ms INTEGER NOT NULL, window_key TEXT, holder_pid INTEGER);
CREATE TABLE windows (
  job TEXT NOT NULL, window_key TEXT NOT NULL, scheduled_at INTEGER, owner TEXT NOT NULL, generation INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 1, first_started_at INTEGER NOT NULL, started_at INTEGER NOT NULL,
  finished_at INTEGER, completed_at INTEGER, outcome TEXT NOT NULL DEFAULT 'running', exit_code INTEGER,
  PRIMARY KEY (job, window_key));
CREATE INDEX windows_open ON windows (job) WHERE completed_at IS NULL;
CREATE TABLE events (
  job TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, window_key TEXT, owner TEXT, host TEXT,
  generation INTEGER, db_time INTEGER NOT NULL, host_time INTEGER, detail TEXT NOT NULL DEFAULT '{}',
  PRIMARY KEY (job, seq));
CREATE TABLE event_counts (
  job TEXT NOT NULL, kind TEXT NOT NULL, host TEXT NOT NULL, n INTEGER NOT NULL DEFAULT 0, last_at INTEGER NOT NULL,
  PRIMARY KEY (job, kind, host));
CREATE TABLE hosts (host TEXT PRIMARY KEY, offset_ms INTEGER NOT NULL, uncertainty_ms INTEGER NOT NULL, measured_at INTEGER NOT NULL);
