-- Embedded store (SQLite), version 9: how a window was last claimed (as sql/026_claimed_as.sql for
-- PostgreSQL): 'backfill', 'catch-up', or NULL for a run's own window, set by every claim, so
-- occurrences are counted by reason from the ledger alone. Windows from before keep NULL.
ALTER TABLE windows ADD COLUMN claimed_as TEXT;
