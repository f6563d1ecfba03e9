#!/bin/sh
# A leasejob child in shell: one fenced write through psql, in one transaction.
#
#   leasejob run --name nightly-report --window 2026-09-25 --pass-database-url \
#     -- sh examples/psql-fenced-write.sh
#
# assert_lease() locks the lease row FOR SHARE until COMMIT and refuses (SQLSTATE LJ001) a
# token that is not the live generation, so a run that lost its lease while paused cannot
# write after the new owner took over. The primary key on idempotency_key makes a repeat of
# the same occurrence a no-op. It needs this table on its search_path:
#
#   CREATE TABLE report_runs (
#     idempotency_key text PRIMARY KEY,      -- <job>:<window>, the same on every attempt
#     fence_token     bigint NOT NULL,       -- which ownership wrote it
#     written_at      timestamptz NOT NULL DEFAULT now()
#   );
#
# Values reach SQL only as psql variables (-v), quoted by psql (:'var' literal, :"var"
# identifier), never spliced into the SQL text. psql interpolates variables in a script read
# from stdin or -f, not in -c, hence the here-document.
#
# Connection: DATABASE_URL (leasejob passes it only with --pass-database-url), else the PG*
# variables (PGHOST, PGUSER, PGPASSFILE, ...). A URL with a password is visible to `ps` as
# psql's argument: prefer PG* variables and a .pgpass file in production.
#
# Exit: 0 written (or already written); 75 the fence refused the write (lost lease: the same
# code leasejob uses); psql's own code (1, 2, 3) for anything else.
set -eu

: "${FENCE_TOKEN:?not set: run me under leasejob run}"
: "${IDEMPOTENCY_KEY:?not set: run me under leasejob run}"
: "${LEASEJOB_NAME:?not set: run me under leasejob run}"

status=0
output=$(psql ${DATABASE_URL:+"$DATABASE_URL"} --no-psqlrc --quiet \
  -v ON_ERROR_STOP=1 -v VERBOSITY=verbose \
  -v schema="${LEASEJOB_SCHEMA:-leasejob}" \
  -v job="$LEASEJOB_NAME" \
  -v token="$FENCE_TOKEN" \
  -v key="$IDEMPOTENCY_KEY" 2>&1 <<'SQL'
BEGIN;
-- First statement of the transaction; keep the transaction short: the owner's renewal waits
-- on this lock. It returns void: \g /dev/null keeps its empty result out of the output.
SELECT :"schema".assert_lease(:'job', :'token') \g /dev/null
-- ... the real work goes here, in the same transaction ...
INSERT INTO report_runs (idempotency_key, fence_token)
VALUES (:'key', :'token')
ON CONFLICT (idempotency_key) DO NOTHING;
COMMIT;
SQL
) || status=$?

if [ "$status" -eq 0 ]; then
  [ -z "$output" ] || printf '%s\n' "$output"
  exit 0
fi
# With ON_ERROR_STOP psql exits at the first error; closing the session rolls back.
printf '%s\n' "$output" >&2
case $output in
  *LJ001*) printf 'psql-fenced-write: fence refused, not written\n' >&2; exit 75 ;;
esac
exit "$status"
