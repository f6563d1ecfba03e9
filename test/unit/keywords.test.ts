// libpq keyword/value connection strings: read as libpq reads them, handed to pg as a URL.
import { describe, expect, it } from 'vitest';
import { parseKeywords, resolveConnection, secretsOf } from '../../src/db.js';

describe('libpq keyword/value strings', () => {
  it('reads pairs, spaces around =, quoted values and backslash escapes', () => {
    const k = parseKeywords(String.raw`host=db.example port = 5433 user=app password='a b\'c' dbname=my\ db sslmode=verify-full`);
    expect(Object.fromEntries(k)).toEqual({ host: 'db.example', port: '5433', user: 'app', password: "a b'c", dbname: 'my db', sslmode: 'verify-full' });
  });

  it('becomes the URL pg reads: encoded credentials, the other keywords as query', () => {
    const src = resolveConnection(String.raw`host=10.0.0.5 port=5433 user=app password='p@ss w/rd' dbname=jobs sslmode=verify-full application_name=lj`, {});
    const url = new URL(src.connectionString!);
    expect([url.hostname, url.port, decodeURIComponent(url.username), decodeURIComponent(url.password), url.pathname]).toEqual(['10.0.0.5', '5433', 'app', 'p@ss w/rd', '/jobs']);
    expect(Object.fromEntries(url.searchParams)).toEqual({ sslmode: 'verify-full', application_name: 'lj' });
    expect(secretsOf(src, {})).toContain('p@ss w/rd');
  });

  it('a socket directory, an IPv6 host, and no dbname (libpq uses the user name)', () => {
    expect(new URL(resolveConnection('host=/var/run/postgresql user=app', {}).connectionString!).host).toBe('%2Fvar%2Frun%2Fpostgresql');
    expect(new URL(resolveConnection('host=::1 user=app', {}).connectionString!).hostname).toBe('[::1]');
    expect(new URL(resolveConnection('host=h user=app', {}).connectionString!).pathname).toBe('/app');
  });

  it('refuses what libpq would: a missing =, an unterminated quote', () => {
    expect(() => resolveConnection('host=h port', {})).toThrow(/missing "=" after port/);
    expect(() => resolveConnection("host=h password='open", {})).toThrow(/unterminated quoted value for password/);
  });
});
