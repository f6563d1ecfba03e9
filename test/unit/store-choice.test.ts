// Which store a command uses, from flags and environment alone (nothing is opened).
import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/errors.js';
import { chooseStore } from '../../src/store/choice.js';

const home = { HOME: '/home/u' };

describe('chooseStore', () => {
  it('each libpq connection variable alone chooses PostgreSQL; nothing, or PGSSLMODE alone, the embedded store', () => {
    for (const v of ['PGHOST', 'PGPORT', 'PGDATABASE', 'PGUSER', 'PGPASSWORD']) {
      expect(chooseStore({}, { ...home, [v]: v === 'PGPORT' ? '5433' : 'x' }).kind, v).toBe('postgresql');
    }
    // A port that is no port is a usage error naming the setting, not an internal one.
    expect(() => chooseStore({}, { ...home, PGPORT: 'x' })).toThrow(/PGPORT/);
    expect(chooseStore({}, home).kind).toBe('sqlite');
    expect(chooseStore({}, { ...home, PGSSLMODE: 'require', PGAPPNAME: 'a' }).kind).toBe('sqlite');
  });

  it('an explicit state file wins over PGPORT, PGUSER and PGPASSWORD, not over PGHOST', () => {
    for (const v of ['PGPORT', 'PGUSER', 'PGPASSWORD']) {
      expect(chooseStore({ stateFile: '/tmp/s.db' }, { ...home, [v]: 'x' }).kind, v).toBe('sqlite');
      expect(chooseStore({}, { ...home, [v]: 'x', LEASEJOB_STATE_FILE: '/tmp/s.db' }).kind, v).toBe('sqlite');
    }
    expect(() => chooseStore({ stateFile: '/tmp/s.db' }, { ...home, PGHOST: 'db' })).toThrow(UsageError);
    // The message names what configured PostgreSQL, not every variable that could have.
    expect(() => chooseStore({ stateFile: '/tmp/s.db' }, { ...home, PGHOST: 'db', PGUSER: 'u' })).toThrow(
      /configured \(PGHOST\); use one or the other/,
    );
    expect(() =>
      chooseStore(
        { stateFile: '/tmp/s.db', databaseUrl: 'postgres://h/d' },
        { ...home, DATABASE_URL: 'postgres://x/y' },
      ),
    ).toThrow(/configured \(--database-url, DATABASE_URL\)/);
  });

  it('a LEASEJOB_REQUIRE_SHARED that is neither on nor off is refused whichever store is chosen, a flag beside it included', () => {
    const url = { ...home, LEASEJOB_DATABASE_URL: 'postgres://h/db' };
    expect(() => chooseStore({}, { ...url, LEASEJOB_REQUIRE_SHARED: 'maybe' })).toThrow(
      /Expected LEASEJOB_REQUIRE_SHARED to be 1, true, yes or on .*got "maybe"/,
    );
    expect(() => chooseStore({ requireShared: true }, { ...url, LEASEJOB_REQUIRE_SHARED: 'maybe' })).toThrow(
      UsageError,
    );
    expect(chooseStore({}, { ...url, LEASEJOB_REQUIRE_SHARED: '1' }).kind).toBe('postgresql');
    expect(chooseStore({}, { ...url, LEASEJOB_REQUIRE_SHARED: 'off' }).kind).toBe('postgresql');
  });

  it("--schema with the embedded store is refused (it would separate nothing); the default schema is PostgreSQL's alone", () => {
    expect(() => chooseStore({ schema: 'billing' }, home)).toThrow(
      /`--schema` names a PostgreSQL schema, but no PostgreSQL is configured/,
    );
    expect(chooseStore({}, home).kind).toBe('sqlite');
    expect(chooseStore({ schema: 'billing' }, { ...home, LEASEJOB_DATABASE_URL: 'postgres://h/db' })).toMatchObject({
      kind: 'postgresql',
      schema: 'billing',
    });
    expect(chooseStore({}, { ...home, LEASEJOB_DATABASE_URL: 'postgres://h/db' })).toMatchObject({
      schema: 'leasejob',
    });
  });

  it('PGSERVICE without a URL is refused; with one it is not read', () => {
    expect(() => chooseStore({}, { ...home, PGSERVICE: 'prod' })).toThrow(
      /PGSERVICE is set \("prod"\), but leasejob does not read pg_service.conf/,
    );
    expect(chooseStore({}, { ...home, PGSERVICE: 'prod', LEASEJOB_DATABASE_URL: 'postgres://u@db/app' }).kind).toBe(
      'postgresql',
    );
  });
});
