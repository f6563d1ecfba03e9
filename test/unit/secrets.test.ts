// What the redaction list holds: every form of the password a message could carry.
import { describe, expect, it } from 'vitest';
import { maskPasswords, redact } from '../../src/secrets.js';
import { secretsOf } from '../../src/store/postgres/connection.js';

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
    expect(
      secretsOf(
        { connectionString: "host=h password='kv-secret' user=u", from: 'DATABASE_URL' },
        { PGPASSWORD: 'env-secret' },
      ),
    ).toEqual(['kv-secret', 'env-secret']);
  });
});

describe('redact', () => {
  it('hides the password as a whole word, and leaves words that only contain it readable', () => {
    const s = secretsOf({ connectionString: 'postgres://postgres:postgres@h/app', from: '--database-url' }, {});
    expect(redact('{"store":"postgresql","location":"postgres://postgres:postgres@h/app"}', s)).toBe(
      '{"store":"postgresql","location":"***://***:***@h/app"}',
    );
    expect(redact('{"msg":"exporter listening","pw":"x"}', ['x'])).toBe('{"msg":"exporter listening","pw":"***"}');
    expect(redact('user:secret@h secret. (secret) secretive mysecret', ['secret'])).toBe(
      'user:***@h ***. (***) secretive mysecret',
    );
  });

  it('an escape right before it is a boundary: JSON escapes, percent-encoding of a URL', () => {
    expect(redact(JSON.stringify({ err: 'a\nhunter2 b\thunter2' }), ['hunter2'])).toBe('{"err":"a\\n*** b\\t***"}');
    expect(redact(encodeURIComponent('postgres://app:hunter2@db/app'), ['hunter2'])).not.toContain('hunter2');
    expect(redact(JSON.stringify({ err: '\u00e9hunter2' }).replace('\u00e9', '\\u00e9'), ['hunter2'])).not.toContain(
      'hunter2',
    );
  });

  it('a long password is hidden wherever it appears, inside a word too', () => {
    expect(redact('xS3cr3t!Passw0rd-long glued:abcxS3cr3t!Passw0rd-longdef', ['xS3cr3t!Passw0rd-long'])).toBe(
      '*** glued:abc***def',
    );
  });

  it('an edge of the password that is not a word character needs no boundary', () => {
    expect(redact('a-pw!b and -pw!', ['-pw!'])).toBe('a***b and ***');
  });

  it('hides the password as a JSON line carries it, quotes and backslashes escaped', () => {
    const s = secretsOf({ connectionString: 'postgres://u:a%22b%5Cc@h/db', from: '--database-url' }, {});
    expect(s).toContain('a\\"b\\\\c');
    const line = JSON.stringify({ msg: 'failed for a"b\\c' });
    expect(redact(line, s)).not.toContain('b\\\\c');
    expect(redact(line, s)).toContain('***');
  });
});

describe('maskPasswords', () => {
  it('masks a URL user info password and a libpq password= value, wherever they stand', () => {
    expect(maskPasswords("unknown option '--databaseurl=postgres://u:Zx9secretQ@h/db'")).toBe(
      "unknown option '--databaseurl=postgres://u:***@h/db'",
    );
    expect(maskPasswords('got `postgresql://app:p%40ss:w0rd@db:5432/jobs` before it')).toBe(
      'got `postgresql://app:***@db:5432/jobs` before it',
    );
    // libpq reads an unquoted value up to a space, quotes included: so is it masked.
    expect(maskPasswords("unknown option '--dburl=host=h password=Zx9secretQ'")).toBe(
      "unknown option '--dburl=host=h password=***",
    );
    expect(maskPasswords("host=h PASSWORD = 'a b\\'c' user=u")).toBe('host=h PASSWORD = *** user=u');
    // Found by review: what libpq and pg read as the password, all of it.
    expect(maskPasswords('--databaseurl=postgres://u:p@ss@h/db')).toBe('--databaseurl=postgres://u:***@h/db');
    expect(maskPasswords('password=abc\\ secretpart user=u')).toBe('password=*** user=u');
    expect(maskPasswords("password=ab'cd user=u")).toBe('password=*** user=u');
    expect(maskPasswords('password="topsecret" user=u')).toBe('password=*** user=u');
    expect(maskPasswords('sslpassword=keysecret oauth_client_secret=s2 scram_client_key=k3')).toBe(
      'sslpassword=*** oauth_client_secret=*** scram_client_key=***',
    );
  });

  it('leaves what is no password alone: a port, a path with @, a URL without user info', () => {
    for (const text of [
      'postgres://db.example:5432/jobs?application_name=a@b',
      'postgres://u@h/db',
      'https://example.com/x',
      'passwords are never logged',
    ]) {
      expect(maskPasswords(text)).toBe(text);
    }
  });
});
