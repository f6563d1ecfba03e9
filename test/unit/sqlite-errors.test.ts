// The embedded store's errors: a state file this user cannot write says what to do.
import { describe, expect, it } from 'vitest';
import { classifySqliteError } from '../../src/store/sqlite/errors.js';
import { DatabaseError } from '../../src/errors.js';

const sqliteError = (code: string, message: string): Error => Object.assign(new Error(message), { code });

describe('embedded store errors', () => {
  it("a state file (or its directory) this user cannot write: exit 69, and run it as the jobs' user", () => {
    for (const code of ['SQLITE_READONLY_DIRECTORY', 'SQLITE_READONLY', 'SQLITE_CANTOPEN']) {
      const e = classifySqliteError(sqliteError(code, 'attempt to write a readonly database'), '/var/lib/jobs/l.db');
      expect(e, code).toBeInstanceOf(DatabaseError);
      expect((e as DatabaseError).exitCode).toBe(69);
      expect(e!.message, code).toMatch(/^state file \/var\/lib\/jobs\/l\.db: .*run it as the user that runs the jobs$/);
    }
  });

  it("other SQLite errors keep their own message; anything else is not the store's", () => {
    expect(
      classifySqliteError(sqliteError('SQLITE_CORRUPT', 'database disk image is malformed'), '/s.db')!.message,
    ).toBe('state file /s.db: database disk image is malformed (SQLITE_CORRUPT)');
    expect(classifySqliteError(new Error('boom'), '/s.db')).toBeUndefined();
  });
});
