// renew_measured() (sql/functions/renew_measured.sql, 035): renew(), recording the holder's clock
// offset for contenders to compare theirs with; answers renewed=false with the database's now()
// when the lease is no longer this generation's, so the keeper can tell a stepped clock.

/** The renewal statement: renew_measured (035) or renew; the replace request rides in it (025). */
export function renewStatement(schema: string, measured: boolean, replaceRequests: boolean): string {
  const fn = measured ? 'renew_measured($1, $2, $3, $4, $5, $6, $7)' : 'renew($1, $2, $3, $4, $5)';
  const replaceFor = !replaceRequests
    ? 'NULL::text'
    : measured
      ? `CASE WHEN r.renewed THEN ${schema}.replace_requested($1, $3) END`
      : `${schema}.replace_requested($1, $3)`;
  return `SELECT r.*, ${replaceFor} AS replace_for FROM ${schema}.${fn} r`;
}

/** The holder's offset values ($6, $7): whole milliseconds, or NULL when none was measured. */
export function offsetValues(offset: { offsetMs: number; uncertaintyMs: number } | undefined): (number | null)[] {
  return offset ? [Math.round(offset.offsetMs), Math.max(0, Math.round(offset.uncertaintyMs))] : [null, null];
}
