// Driver errors as the operator sees them: which SQLSTATE or errno becomes which error code,
// exit code and advice. The integration tests provoke some of these on a real server; the
// others (a crashed server, a full disk) cannot be provoked there.
import { describe, expect, it } from 'vitest';
import {
  classifyDbError,
  isTransientDbError,
  noAnswerWithin,
  wasRolledBack,
} from '../../src/store/postgres/db-errors.js';

const ctx = { schema: 'leasejob', secrets: ['s3cret'], target: 'postgres://u:***@db/app' };
const pgError = (code: string, message = `error ${code} s3cret`): Error => Object.assign(new Error(message), { code });

describe('classifyDbError', () => {
  it.each([
    ['25006', 'E_DB_REFUSED', /read-only \(a standby\?\)/],
    ['57014', 'E_DB_REFUSED', /cancelled the statement/],
    [
      '40001',
      'E_DB_REFUSED',
      /a serialization failure on every try: .*default_transaction_isolation.*recovery conflict/,
    ],
    ['40P01', 'E_DB_REFUSED', /a deadlock on every try/],
    ['25P03', 'E_DB_REFUSED', /ended the session \(idle_in_transaction_session_timeout/],
    ['25P04', 'E_DB_REFUSED', /ended the session/],
    ['53100', 'E_DB_REFUSED', /out of a resource/],
    ['58030', 'E_DB_REFUSED', /stopped the statement/],
    ['57P01', 'E_DB_UNREACHABLE', /database unreachable/],
    ['08006', 'E_DB_UNREACHABLE', /database unreachable/],
    ['ECONNREFUSED', 'E_DB_UNREACHABLE', /database unreachable/],
    ['42501', 'E_DB_PERMISSION', /permission denied.*migrate --grant-to/],
    ['3F000', 'E_NOT_MIGRATED', /leasejob migrate/],
    ['28P01', 'E_DB_AUTH', /refused the connection/],
  ])('SQLSTATE/errno %s: %s, exit 69, the SQLSTATE named and the secret masked', (code, errorCode, advice) => {
    const e = classifyDbError(pgError(code), ctx);
    expect(e?.code).toBe(errorCode);
    expect(e?.exitCode).toBe(69);
    expect(e?.message).toMatch(advice);
    expect(e?.message).not.toContain('s3cret');
    if (errorCode === 'E_DB_REFUSED') expect(e?.message).toContain(`(SQLSTATE ${code})`);
  });

  it("the driver's own words become leasejob's: no password for SCRAM, other SCRAM failures, Node's errnos", () => {
    const said = (err: Error): string => classifyDbError(err, ctx)!.message;
    const noPassword = said(new Error('SASL: SCRAM-SERVER-FIRST-MESSAGE: client password must be a string'));
    expect(noPassword).toMatch(/it asks for a password and none was found; give one in the URL, PGPASSWORD/);
    const signature = classifyDbError(
      new Error('SASL: SCRAM-SERVER-FINAL-MESSAGE: server signature does not match'),
      ctx,
    )!;
    expect(signature.code).toBe('E_DB_AUTH');
    expect(signature.message).toMatch(/proof of the password \(SCRAM\) does not match/);
    expect(said(new Error('SASL: Only mechanism SCRAM-SHA-256 is currently supported'))).toMatch(
      /a password exchange leasejob cannot do/,
    );
    const net = (code: string, fields: Record<string, unknown>): string =>
      said(Object.assign(new Error(`connect ${code} whatever`), { code, syscall: 'connect', ...fields }));
    expect(net('ECONNREFUSED', { address: '10.0.0.5', port: 5432 })).toMatch(
      /: connection refused: nothing listens at 10\.0\.0\.5:5432 \(ECONNREFUSED\)$/,
    );
    expect(net('ENOTFOUND', { hostname: 'db.example' })).toMatch(
      /: no such host name db\.example \(DNS\) \(ENOTFOUND\)$/,
    );
    expect(net('ENOENT', { address: '/run/postgresql/.s.PGSQL.5432' })).toMatch(
      /: no server socket at \/run\/postgresql\/\.s\.PGSQL\.5432 /,
    );
    expect(net('EACCES', { address: '/run/postgresql/.s.PGSQL.5432' })).toMatch(/: not allowed to open /);
    for (const m of [noPassword, signature.message]) expect(m).not.toMatch(/SASL|SCRAM-SERVER|must be a string/);
  });

  it('no answer within our own bound: said as such, not as "unreachable"', () => {
    const e = classifyDbError(noAnswerWithin(5000), ctx);
    expect(e?.code).toBe('E_DB_UNREACHABLE');
    expect(e?.message).toMatch(
      /^database at .* did not answer in time: the database did not answer within 5000 ms \(unreachable, overloaded, or the statement waiting for a lock/,
    );
  });

  it('anything else is not a database condition (the caller reports it as internal)', () => {
    expect(classifyDbError(pgError('22P02'), ctx)).toBeUndefined();
    expect(classifyDbError(new Error('boom'), ctx)).toBeUndefined();
  });

  it('only a serialization failure and a deadlock count as rolled back (sent again)', () => {
    expect(wasRolledBack(pgError('40001'))).toBe(true);
    expect(wasRolledBack(pgError('40P01'))).toBe(true);
    for (const code of ['40002', '40003', '25P03', '57014', '08006'])
      expect(wasRolledBack(pgError(code)), code).toBe(false);
    expect(isTransientDbError(pgError('40001'))).toBe(false);
  });
});
