// What a schema has against what the shipped migrations make. A schema can be at the newest
// version and still differ: made by a development build whose migration files were changed
// later, a function edited by hand, an old build winning a race to migrate. `migrate` then
// replaces the schema's functions with this build's (their bodies are all of leasejob's logic
// there), and refuses tables it cannot mend, rather than saying "up to date" over a schema
// that every run then fails on.
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { DatabaseError } from '../../errors.js';

export interface DriftReport {
  /** Functions created or replaced by this build's definition, as `name(args)`. */
  repaired: string[];
  /** Functions the migrations do not make (left in place: an older build may still call them). */
  extra: string[];
  /** Why nothing was compared (no right to create the reference schema), if so. */
  skipped?: string;
}

export interface FunctionRow {
  oid: string;
  name: string;
  args: string;
  fingerprint: string;
}

/** Each function of `schema`: its identity and everything that makes it behave as it does. */
export async function functionsOf(client: pg.PoolClient, schema: string): Promise<FunctionRow[]> {
  const { rows } = await client.query<FunctionRow>(
    `SELECT p.oid::text AS oid, p.proname AS name, pg_get_function_identity_arguments(p.oid) AS args,
            concat_ws('|', pg_get_function_result(p.oid), l.lanname, p.prosecdef, p.provolatile, md5(p.prosrc),
                      array_to_string(p.proconfig, ',')) AS fingerprint
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
      WHERE n.nspname = $1`,
    [schema],
  );
  // Type and search_path names carry the schema's own name: compared without it.
  return rows.map((r) => ({ ...r, args: unqualify(r.args, schema), fingerprint: unqualify(r.fingerprint, schema) }));
}

/** Each column of each table of `schema` but the migrations ledger, as `table.column type`. */
async function columnsOf(client: pg.PoolClient, schema: string): Promise<Set<string>> {
  const { rows } = await client.query<{ col: string }>(
    `SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) AS col
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid
      WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND c.relname <> 'migrations' AND a.attnum > 0 AND NOT a.attisdropped`,
    [schema],
  );
  return new Set(rows.map((r) => unqualify(r.col, schema)));
}

/** `schema` (a lowercase identifier) as a whole name, quoted or not, replaced by a placeholder. */
function unqualify(text: string, schema: string): string {
  return text.replace(new RegExp(`(?<![\\w$"])"?${schema}"?(?![\\w$"])`, 'g'), '$$schema');
}

/**
 * Inside migrate's transaction, after its migrations: build the reference (every migration
 * applied to a new schema of a random name, under a savepoint, rolled back after), compare,
 * and mend `schema`'s functions. Throws E_SCHEMA_DRIFT (exit 69) for a table or column the
 * schema lacks; the caller's transaction then rolls back whole.
 */
export async function reconcileSchema(
  client: pg.PoolClient,
  schema: string,
  migrationTexts: readonly string[],
): Promise<DriftReport> {
  const reference = `leasejob_reference_${randomBytes(6).toString('hex')}`;
  await client.query('SAVEPOINT leasejob_reference');
  let want: { functions: FunctionRow[]; columns: Set<string>; definitions: Map<string, string> };
  try {
    await client.query(`CREATE SCHEMA "${reference}"`);
    await client.query(`SELECT set_config('search_path', $1, true)`, [`"${reference}", pg_catalog, pg_temp`]);
    for (const text of migrationTexts) await client.query(text);
    const functions = await functionsOf(client, reference);
    const { rows } = await client.query<{ oid: string; def: string }>(
      `SELECT p.oid::text AS oid, pg_get_functiondef(p.oid) AS def FROM pg_proc p WHERE p.pronamespace = $1::regnamespace`,
      [reference],
    );
    // The qualifier quoted (a schema may be named like a keyword); the pinned search_path
    // taken FROM CURRENT, as the migrations do, so it is stored exactly as theirs is.
    const definitions = new Map(
      rows.map((r) => [
        r.oid,
        r.def
          .replace(`SET search_path TO '${reference}', 'pg_catalog', 'pg_temp'`, 'SET search_path FROM CURRENT')
          .split(`${reference}.`)
          .join(`"${schema}".`)
          .split(reference)
          .join(schema),
      ]),
    );
    want = { functions, columns: await columnsOf(client, reference), definitions };
  } catch (err) {
    await client.query('ROLLBACK TO SAVEPOINT leasejob_reference');
    await client.query(`SELECT set_config('search_path', $1, true)`, [`"${schema}", pg_catalog, pg_temp`]);
    // Only the schema's owner may have been given this database: nothing to compare with.
    if ((err as { code?: string }).code === '42501')
      return { repaired: [], extra: [], skipped: (err as Error).message };
    throw err;
  }
  await client.query('ROLLBACK TO SAVEPOINT leasejob_reference');
  await client.query(`SELECT set_config('search_path', $1, true)`, [`"${schema}", pg_catalog, pg_temp`]);

  const haveColumns = await columnsOf(client, schema);
  const missing = [...want.columns].filter((c) => !haveColumns.has(c)).sort();
  if (missing.length > 0) {
    throw new DatabaseError(
      `schema "${schema}" differs from what leasejob's migrations make, in tables it cannot mend: ` +
        `missing ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ` and ${missing.length - 5} more` : ''}. ` +
        'It was most likely made by a development build whose migrations changed later. Nothing was changed. ' +
        `Keep what you need from it, then re-create it (DROP SCHEMA "${schema}" CASCADE; leasejob ` +
        `migrate), or add what is missing by hand.`,
      'E_SCHEMA_DRIFT',
    );
  }

  const have = await functionsOf(client, schema);
  const key = (f: FunctionRow): string => `${f.name}(${f.args})`;
  const haveByKey = new Map(have.map((f) => [key(f), f]));
  // Roles given the existing functions (runner roles, by --grant-to) get a created one too;
  // read once, when a function is missing.
  let grantees: string[] | undefined;
  const granteesOf = async (): Promise<string[]> =>
    (grantees ??= (
      await client.query<{ role: string }>(
        `SELECT DISTINCT a.grantee::regrole::text AS role
       FROM pg_proc p, aclexplode(p.proacl) a
      WHERE p.pronamespace = $1::regnamespace AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner`,
        [schema],
      )
    ).rows.map((r) => r.role));
  const repaired: string[] = [];
  for (const f of want.functions) {
    const current = haveByKey.get(key(f));
    if (current?.fingerprint === f.fingerprint) continue;
    await client.query('SAVEPOINT leasejob_repair');
    try {
      await client.query(want.definitions.get(f.oid)!);
      if (current === undefined) {
        // Identifiers quoted by the server (format %I; a regrole prints quoted as needed).
        const { rows } = await client.query<{ sql: string }>(
          `WITH f AS (SELECT p.oid::regprocedure AS fn FROM pg_proc p
                       WHERE p.pronamespace = $1::regnamespace AND p.proname = $2 AND pg_get_function_identity_arguments(p.oid) = $3)
           SELECT format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn) AS sql FROM f
           UNION ALL SELECT format('GRANT EXECUTE ON FUNCTION %s TO %s', fn, r) FROM f, unnest($4::text[]) AS r`,
          [schema, f.name, f.args.split('$schema').join(schema), await granteesOf()],
        );
        for (const r of rows) await client.query(r.sql);
      }
    } catch (err) {
      await client.query('ROLLBACK TO SAVEPOINT leasejob_repair');
      throw new DatabaseError(
        `schema "${schema}" differs from what leasejob's migrations make: its function ${key(f)} cannot ` +
          `be replaced by this build's (${(err as Error).message}). Nothing was changed. ` +
          `Re-create the schema (DROP SCHEMA "${schema}" CASCADE; leasejob migrate) once what you need is ` +
          `kept, or drop that function by hand and migrate again.`,
        'E_SCHEMA_DRIFT',
        { cause: err },
      );
    }
    repaired.push(key(f));
  }
  const wanted = new Set(want.functions.map(key));
  const extra = have
    .map(key)
    .filter((k) => !wanted.has(k))
    .sort();
  return { repaired, extra };
}
