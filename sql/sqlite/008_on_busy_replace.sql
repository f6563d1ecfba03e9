-- Embedded store (SQLite), version 8: `run --on-busy replace` (as sql/025_on_busy_replace.sql for
-- PostgreSQL): the run that asked a lease's holder to stop, the window it runs, and the generation
-- asked (a later holder is never told to stop by an old request).
ALTER TABLE leases ADD COLUMN replace_by TEXT;
ALTER TABLE leases ADD COLUMN replace_window TEXT;
ALTER TABLE leases ADD COLUMN replace_generation INTEGER;
