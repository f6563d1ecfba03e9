#!/usr/bin/env node
// Writes the next numbered migration from the SQL function files changed since the last one.
//
//   npm run sql:migration -- <name> [--number N] [function ...]
//
// sql/functions/<fn>.sql is the one current definition of each function; a migration that
// changes a function carries its whole new body. This copies every function file that differs
// from the function's last definition in the numbered migrations (or the functions named) into
// sql/<NNN>_<name>.sql, for you to head with what changed and why. Compared by text, not by git
// history, so it holds across merges of several branches' migrations.
// test/integration/sql-functions.test.ts then checks that the migrations and the files agree.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const usage =
  'usage: npm run sql:migration -- <name> [--number N] [function ...]   (name: lowercase letters, digits, _)';
function fail(message) {
  console.error(`sql:migration: ${message}\n${usage}`);
  process.exit(64);
}

const args = process.argv.slice(2);
let number;
const positional = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--number') {
    number = Number(args[++i]);
    if (!Number.isInteger(number) || number < 1)
      fail(`--number needs a positive whole number, got ${JSON.stringify(args[i] ?? '')}`);
  } else if (args[i] === '--help' || args[i] === '-h') {
    console.log(usage);
    process.exit(0);
  } else positional.push(args[i]);
}
const [name, ...named] = positional;
if (name === undefined || !/^[a-z0-9_]+$/.test(name))
  fail(`a migration name is needed, got ${JSON.stringify(name ?? '')}`);

const root = execFileSync('git', ['rev-parse', '--show-toplevel'], { encoding: 'utf8' }).trim();
const sqlDir = path.join(root, 'sql');
const fnDir = path.join(sqlDir, 'functions');
const migrations = readdirSync(sqlDir)
  .filter((f) => /^\d{3,}_[a-z0-9_]+\.sql$/.test(f))
  .sort();

/** Each `CREATE [OR REPLACE] FUNCTION` statement of `text`, by function name, in order. */
function statements(text) {
  const out = [];
  for (const m of text.matchAll(/^CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+([a-z_][a-z0-9_]*)\s*\(/gim)) {
    const open = /\$([A-Za-z_]*)\$/.exec(text.slice(m.index));
    if (!open) continue;
    const bodyAt = m.index + open.index + open[0].length;
    const close = text.indexOf(open[0], bodyAt);
    const end = close < 0 ? -1 : text.indexOf(';', close + open[0].length);
    if (end < 0) continue;
    out.push([m[1].toLowerCase(), text.slice(m.index, end + 1)]);
  }
  return out;
}
// Compared as statements, with OR REPLACE, SECURITY DEFINER (which 003 added by ALTER) and
// the amount of whitespace aside.
const normal = (s) =>
  s
    .replace(/\bOR\s+REPLACE\s+/i, '')
    .replace(/\bSECURITY\s+DEFINER\s+/i, '')
    .replace(/\s+/g, ' ')
    .trim();

const current = new Map();
for (const f of migrations)
  for (const [fn, stmt] of statements(readFileSync(path.join(sqlDir, f), 'utf8'))) current.set(fn, stmt);
const fileStatement = (fn) =>
  statements(readFileSync(path.join(fnDir, `${fn}.sql`), 'utf8')).find(([n]) => n === fn)?.[1];
const isNew = (fn) => !current.has(fn);

let functions = named;
if (functions.length === 0) {
  functions = readdirSync(fnDir)
    .filter((f) => f.endsWith('.sql'))
    .map((f) => f.replace(/\.sql$/, ''))
    .sort()
    .filter((fn) => {
      const s = fileStatement(fn);
      return s === undefined || !current.has(fn) || normal(s) !== normal(current.get(fn));
    });
  if (functions.length === 0)
    fail(
      'every file in sql/functions/ is as the newest migration that defines its function left it; edit one first, or name the functions',
    );
}
for (const fn of functions) {
  if (!existsSync(path.join(fnDir, `${fn}.sql`))) fail(`sql/functions/${fn}.sql does not exist`);
  if (fileStatement(fn) === undefined) fail(`sql/functions/${fn}.sql has no CREATE OR REPLACE FUNCTION ${fn}(...)`);
}

const next = number ?? Math.max(0, ...migrations.map((f) => Number.parseInt(f, 10))) + 1;
const taken = migrations.find((f) => Number.parseInt(f, 10) === next);
if (taken) fail(`migration number ${next} is taken by sql/${taken}`);
const file = `${String(next).padStart(3, '0')}_${name}.sql`;

const body = functions.map((fn) => `-- ${fn}: as in sql/functions/${fn}.sql\n${fileStatement(fn)}\n`);
const created = functions.filter(isNew);
const grants =
  created.length === 0
    ? []
    : [
        `-- New: ${created.join(', ')}. Not executable by PUBLIC; executable by every role already given the`,
        '-- others (the runner roles of `migrate --grant-to`), as for every leasejob function.',
        'DO $$',
        'DECLARE r record;',
        'BEGIN',
        "  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', current_schema());",
        '  FOR r IN SELECT DISTINCT a.grantee::regrole::text AS role FROM pg_proc p, aclexplode(p.proacl) a',
        "            WHERE p.pronamespace = current_schema()::regnamespace AND p.proname = 'acquire'",
        "              AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner LOOP",
        "    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %I TO %s', current_schema(), r.role);",
        '  END LOOP;',
        'END $$;',
        '',
      ];
const header = [
  `-- ${String(next).padStart(3, '0')}: TODO say what changes for whom, and why (this header is the migration's record).`,
  `-- Functions: ${functions.join(', ')}, each its whole current definition from sql/functions/.`,
  '-- CREATE OR REPLACE keeps the privileges granted on a function of the same signature;',
  '-- SECURITY DEFINER and the pinned search_path are restated, as CREATE OR REPLACE resets them.',
  '',
];
writeFileSync(
  path.join(sqlDir, file),
  [...header, ...body.join('\n').split('\n'), ...grants].join('\n').replace(/\n+$/, '\n'),
);
console.log(
  `wrote sql/${file} (${functions.join(', ')}): write its header, then add it to test/unit/migrations-frozen.test.ts once it is merged`,
);
