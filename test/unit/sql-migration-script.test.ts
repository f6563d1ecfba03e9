// scripts/sql-migration.mjs: the next numbered migration, made of the function files that differ
// from the migrations' last definitions, in a copy of sql/ inside a scratch git checkout.
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDirs } from '../helpers/temp.js';
import { ROOT } from '../helpers/wait.js';

const newDir = tempDirs('leasejob-sql-migration-');
const script = path.join(ROOT, 'scripts', 'sql-migration.mjs');

function checkout(): string {
  const dir = newDir();
  cpSync(path.join(ROOT, 'sql'), path.join(dir, 'sql'), { recursive: true });
  execFileSync('git', ['init', '-q', dir]);
  return dir;
}
const run = (cwd: string, ...args: string[]) =>
  spawnSync(process.execPath, [script, ...args], { cwd, encoding: 'utf8' });
const numbered = (dir: string): string[] =>
  readdirSync(path.join(dir, 'sql'))
    .filter((f) => /^\d+_.*\.sql$/.test(f))
    .sort();

describe('npm run sql:migration', () => {
  it('with no function changed: exit 64, nothing written', () => {
    const dir = checkout();
    const before = numbered(dir);
    const r = run(dir, 'nothing');
    expect(r.status, r.stderr).toBe(64);
    expect(r.stderr).toContain('edit one first');
    expect(numbered(dir)).toEqual(before);
  });

  it('an edited function: the next number, holding that function whole and no other; then nothing left to copy', () => {
    const dir = checkout();
    const last = Math.max(...numbered(dir).map((f) => Number.parseInt(f, 10)));
    const file = path.join(dir, 'sql', 'functions', 'renew.sql');
    writeFileSync(
      file,
      readFileSync(file, 'utf8').replace('RETURNING now(), l.expires_at;', 'RETURNING now(), l.expires_at; -- changed'),
    );
    const r = run(dir, 'renew_changed');
    expect(r.status, r.stderr).toBe(0);
    const made = `${String(last + 1).padStart(3, '0')}_renew_changed.sql`;
    expect(numbered(dir).at(-1)).toBe(made);
    const text = readFileSync(path.join(dir, 'sql', made), 'utf8');
    expect(text).toContain('-- changed');
    expect(text.match(/CREATE OR REPLACE FUNCTION (\w+)/g)).toEqual(['CREATE OR REPLACE FUNCTION renew']);
    expect(text).not.toContain('REVOKE');
    expect(run(dir, 'again').status).toBe(64);
  });

  it('a new function file gets its privileges set up; a taken --number or a bad name is refused', () => {
    const dir = checkout();
    writeFileSync(
      path.join(dir, 'sql', 'functions', 'noop.sql'),
      '-- noop(): a test function.\nCREATE OR REPLACE FUNCTION noop() RETURNS void\nLANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$ SELECT $$;\n',
    );
    expect(run(dir, 'x', '--number', '1').stderr).toContain('taken by sql/001_init.sql');
    expect(run(dir, 'Bad-Name').status).toBe(64);
    const r = run(dir, 'noop', '--number', '900');
    expect(r.status, r.stderr).toBe(0);
    const text = readFileSync(path.join(dir, 'sql', '900_noop.sql'), 'utf8');
    expect(text).toContain('CREATE OR REPLACE FUNCTION noop()');
    expect(text).toContain('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA');
  });
});
