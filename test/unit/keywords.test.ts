// libpq keyword/value connection strings: read as libpq reads them, handed to pg as a URL.
import { describe, expect, it } from 'vitest';
import { parseKeywords, resolveConnection, secretsOf } from '../../src/store/postgres/connection.js';

describe('libpq keyword/value strings', () => {
  it('reads pairs, spaces around =, quoted values and backslash escapes', () => {
    const k = parseKeywords(
      String.raw`host=db.example port = 5433 user=app password='a b\'c' dbname=my\ db sslmode=verify-full`,
    );
    expect(Object.fromEntries(k)).toEqual({
      host: 'db.example',
      port: '5433',
      user: 'app',
      password: "a b'c",
      dbname: 'my db',
      sslmode: 'verify-full',
    });
  });

  it('becomes the URL pg reads: encoded credentials, the other keywords as query', () => {
    const src = resolveConnection(
      String.raw`host=10.0.0.5 port=5433 user=app password='p@ss w/rd' dbname=jobs sslmode=verify-full application_name=lj`,
      {},
    );
    const url = new URL(src.connectionString!);
    expect([
      url.hostname,
      url.port,
      decodeURIComponent(url.username),
      decodeURIComponent(url.password),
      url.pathname,
    ]).toEqual(['10.0.0.5', '5433', 'app', 'p@ss w/rd', '/jobs']);
    expect(Object.fromEntries(url.searchParams)).toEqual({ sslmode: 'verify-full', application_name: 'lj' });
    expect(secretsOf(src, {})).toContain('p@ss w/rd');
  });

  it('a socket directory, an IPv6 host, and no dbname (libpq uses the user name)', () => {
    expect(new URL(resolveConnection('host=/var/run/postgresql user=app', {}).connectionString!).host).toBe(
      '%2Fvar%2Frun%2Fpostgresql',
    );
    expect(new URL(resolveConnection('host=::1 user=app', {}).connectionString!).hostname).toBe('[::1]');
    expect(new URL(resolveConnection('host=h user=app', {}).connectionString!).pathname).toBe('/app');
  });

  it('refuses what libpq would: a missing =, an unterminated quote', () => {
    expect(() => resolveConnection('host=h port', {})).toThrow(/missing "=" after port/);
    expect(() => resolveConnection("host=h password='open", {})).toThrow(/unterminated quoted value for password/);
  });
});

describe('connection option names', () => {
  it('refuses a misspelt option, as psql does: pg would ignore it (sslmod=verify-full connecting without TLS)', () => {
    for (const [given, near] of [
      ['sslmod', 'sslmode'],
      ['ssl_mode', 'sslmode'],
      ['SSLMODE', 'sslmode'],
      ['sslrootcrt', 'sslrootcert'],
      ['keepalive', 'keepalives'],
      ['conect_timeout', 'connect_timeout'],
    ]) {
      for (const s of [`postgres://u@h/db?${given}=x`, `host=h user=u ${given}=x`]) {
        expect(() => resolveConnection(s, {}), s).toThrow(
          new RegExp(`invalid connection option "${given}" in \`--database-url\`: did you mean "${near}"\\?`),
        );
      }
    }
    expect(() => resolveConnection(undefined, { LEASEJOB_DATABASE_URL: 'postgres://h/db?sslmod=require' })).toThrow(
      /in LEASEJOB_DATABASE_URL/,
    );
  });

  it("refuses an unknown ssl* option (another client's TLS setting means nothing to pg)", () => {
    expect(() => resolveConnection('postgres://u@h/db?sslaccept=strict', {})).toThrow(
      /"sslaccept" in `--database-url`: it is not one of libpq's TLS keywords .*Nothing was connected\.$/,
    );
    // Prisma's own TLS option in a DATABASE_URL shared with the application: said how to separate them.
    expect(() =>
      resolveConnection(undefined, { DATABASE_URL: 'postgres://u@h/db?schema=public&sslaccept=strict' }),
    ).toThrow(
      /"sslaccept" in DATABASE_URL: .*\(DATABASE_URL may be shared with a program that needs it: give leasejob its own LEASEJOB_DATABASE_URL\.\)$/,
    );
  });

  it('refuses libpq options node-postgres would ignore to a worse connection: service, sslcrl', () => {
    expect(() => resolveConnection('service=prod', {})).toThrow(
      /connection option "service" in `--database-url` is not supported: .*pg_service\.conf/,
    );
    expect(() => resolveConnection('postgres://u@h/db?sslmode=verify-full&sslcrl=/crl.pem', {})).toThrow(
      /"sslcrl" .* not supported: .*revocation/,
    );
  });

  it('refuses libpq options node-postgres cannot honour: require_auth, requirepeer, channel_binding=require, gssencmode=require', () => {
    expect(() => resolveConnection('postgres://u@h/db?require_auth=scram-sha-256', {})).toThrow(
      /connection option "require_auth" in `--database-url` is not supported: .*plain password would get it.*Nothing was connected\.$/,
    );
    expect(() => resolveConnection('host=/run/postgresql requirepeer=postgres', {})).toThrow(
      /"requirepeer" .* not supported: .*Unix socket/,
    );
    expect(() => resolveConnection('postgres://u@h/db?sslmode=verify-full&channel_binding=require', {})).toThrow(
      /channel_binding=require in `--database-url` is not supported: .*cannot require it/,
    );
    expect(() => resolveConnection(undefined, { DATABASE_URL: 'postgres://u@h/db?gssencmode=require' })).toThrow(
      /gssencmode=require in DATABASE_URL is not supported: .*unencrypted.*give leasejob its own LEASEJOB_DATABASE_URL/,
    );
    // What libpq would read from the environment when the string leaves it out.
    expect(() => resolveConnection('postgres://u@h/db', { PGREQUIREAUTH: 'scram-sha-256' })).toThrow(
      /^PGREQUIREAUTH=scram-sha-256 is set, and is not supported: .*Unset it to connect\. Nothing was connected\.$/,
    );
    expect(() => resolveConnection(undefined, { PGHOST: 'h', PGCHANNELBINDING: 'require' })).toThrow(
      /^PGCHANNELBINDING=require is set/,
    );
    // In any case: libpq would refuse `Require` as no value of its own, so it is not let through either.
    expect(() => resolveConnection('postgres://u@h/db?channel_binding=Require', {})).toThrow(
      /channel_binding=Require in `--database-url` is not supported/,
    );
    expect(() => resolveConnection('postgres://u@h/db', { PGGSSENCMODE: 'REQUIRE' })).toThrow(
      /^PGGSSENCMODE=REQUIRE is set/,
    );
    // Values libpq also takes as asking for nothing more pass, in the string or the environment.
    for (const ok of [
      'channel_binding=prefer',
      'channel_binding=disable',
      'gssencmode=prefer',
      'gssencmode=disable',
      'require_auth=',
      'requirepeer=',
    ]) {
      expect(() => resolveConnection(`postgres://u@h/db?${ok}`, {}), ok).not.toThrow();
    }
    expect(() =>
      resolveConnection('postgres://u@h/db', {
        PGCHANNELBINDING: 'prefer',
        PGGSSENCMODE: 'disable',
        PGREQUIREAUTH: '',
      }),
    ).not.toThrow();
    // The string's own value wins over the environment's, as in libpq.
    expect(() =>
      resolveConnection('postgres://u@h/db?channel_binding=prefer', { PGCHANNELBINDING: 'require' }),
    ).not.toThrow();
  });

  it("takes libpq's keywords, pg's ssl, and options other programs put in a shared DATABASE_URL", () => {
    const ok = [
      'postgres://u@h/db?sslmode=require&sslkeylogfile=/k.log&application_name=a&connect_timeout=5&target_session_attrs=read-write&options=-c%20x%3D1',
      'postgres://u@h/db?ssl=true',
      'postgres://u@h/db?schema=public&connection_limit=1&pgbouncer=true&pool_timeout=10',
      'host=h user=u keepalives=1 keepalives_idle=30 sslnegotiation=postgres sslmode=require',
    ];
    for (const s of ok) expect(() => resolveConnection(s, {}), s).not.toThrow();
    expect(() => resolveConnection(undefined, { DATABASE_URL: 'postgres://h/db?schema=public' })).not.toThrow();
  });

  it("a port that is no port number (PGPORT=abc, port=99999) is a usage error, not a RangeError of Node's", () => {
    expect(() => resolveConnection(undefined, { PGHOST: 'h', PGPORT: 'abc' })).toThrow(
      /^Expected PGPORT to be a port number from 1 to 65535, got "abc"\.$/,
    );
    expect(() => resolveConnection('postgres://u@h/db', { PGPORT: '70000' })).toThrow(/PGPORT/);
    expect(() => resolveConnection('host=h port=99999 user=u', {})).toThrow(/port= in `--database-url`/);
    // A port in the URL wins over PGPORT, as in libpq; a good PGPORT is taken.
    expect(() => resolveConnection('postgres://u@h:5433/db', { PGPORT: 'abc' })).not.toThrow();
    expect(() => resolveConnection(undefined, { PGHOST: 'h', PGPORT: '5433' })).not.toThrow();
  });
});
