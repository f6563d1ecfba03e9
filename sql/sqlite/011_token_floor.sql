-- Embedded store (SQLite), version 11: the token floor (as PostgreSQL's fence_epoch.token_floor,
-- sql/021): one row naming the boot and the state file (device and inode) the lease tokens were
-- last issued under, and the floor no token goes below. An acquisition under another boot (a
-- host restored, a reboot) or from another file (a backup or copied volume put in place of the
-- old one) raises the floor to the store clock in milliseconds since 2025-01-01 first, so a
-- file restored from a backup never issues a token it issued before (docs/fencing.md).
CREATE TABLE token_floor (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  boot_id TEXT NOT NULL,
  file_id TEXT NOT NULL,
  floor INTEGER NOT NULL DEFAULT 0,
  raised_at INTEGER
);
