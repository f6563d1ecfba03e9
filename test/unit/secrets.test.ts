// What the redaction list holds: every form of the password a message could carry.
import { describe, expect, it } from 'vitest';
import { redact, secretsOf } from '../../src/db.js';

describe('secretsOf', () => {
  it('holds the URL password raw and decoded', () => {
    const s = secretsOf({ connectionString: 'postgres://u:p%40ss@h/db', from: '--database-url' }, {});
    expect(s).toEqual(['p%40ss', 'p@ss']);
  });

  it('still holds the raw password when its percent escape is malformed (URL accepts it, decodeURIComponent throws)', () => {
    const s = secretsOf({ connectionString: 'postgres://u:sentinel%zzpw@h/db', from: '--database-url' }, {});
    expect(s).toEqual(['sentinel%zzpw']);
    expect(redact('auth failed for postgres://u:sentinel%zzpw@h/db', s)).not.toContain('sentinel');
  });

  it('holds password= of a key=value string and PGPASSWORD', () => {
    expect(secretsOf({ connectionString: "host=h password='kv-secret' user=u", from: 'DATABASE_URL' }, { PGPASSWORD: 'env-secret' })).toEqual(['kv-secret', 'env-secret']);
  });
});
