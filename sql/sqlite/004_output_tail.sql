-- Embedded store (SQLite) 004: --record-output, as sql/015_output_tail.sql for PostgreSQL: the
-- last bytes a window's child wrote, for the attempt (generation) that wrote them. Only new
-- columns: an older leasejob refuses the file once upgraded (its user_version is newer).
ALTER TABLE windows ADD COLUMN output_tail BLOB;
ALTER TABLE windows ADD COLUMN output_bytes INTEGER;
ALTER TABLE windows ADD COLUMN output_generation INTEGER;
ALTER TABLE windows ADD COLUMN output_attempt INTEGER;
ALTER TABLE windows ADD COLUMN output_at INTEGER;
