-- Embedded store (SQLite), version 7: the attempt budget a window was claimed (or refused)
-- under, `run --max-attempts <n>` (as sql/024_attempt_budget.sql for PostgreSQL); NULL: none.
ALTER TABLE windows ADD COLUMN max_attempts INTEGER;
