import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/errors.js';
import { driverTls } from '../../src/store/postgres/tls.js';
import { fixture } from '../helpers/wait.js';

const ca = fixture('tls/ca.pem');

describe('driverTls', () => {
  it('leaves a string without TLS keywords, and an environment without PGSSL*, to pg', () => {
    const url = 'postgres://u:p%40ss@db:5432/app?application_name=x';
    expect(driverTls(url, {})).toEqual({ connectionString: url });
    expect(driverTls(undefined, {})).toEqual({ connectionString: undefined });
  });

  it('with no sslmode anywhere, leaves TLS to pg: a host exporting PGSSLROOTCERT still reaches a plain server', () => {
    expect(driverTls('postgres://db/app', { PGSSLROOTCERT: ca })).toEqual({ connectionString: 'postgres://db/app' });
  });

  it('a certificate named in the string with no sslmode: verify-full, as pg reads it, with an unreadable file a usage error', () => {
    expect(driverTls(`postgres://db/app?sslrootcert=${ca}`, {})).toEqual({
      connectionString: 'postgres://db/app',
      ssl: { ca: readFileSync(ca, 'utf8') },
    });
    expect(() => driverTls('postgres://db/app?sslrootcert=/nonexistent/ca.pem', {})).toThrow(
      /Cannot read sslrootcert "\/nonexistent\/ca.pem" \(ENOENT\)/,
    );
    expect(() => driverTls('postgres://db/app?sslcert=/nonexistent/c.pem', {})).toThrow(UsageError);
    // An empty value is unset, as in libpq: no TLS (pg ignores the empty keyword too).
    expect(driverTls('postgres://db/app?sslrootcert=', {})).toEqual({
      connectionString: 'postgres://db/app?sslrootcert=',
    });
  });

  it('takes the TLS keywords out of the string pg sees, keeping the rest as given', () => {
    const d = driverTls('postgres://u:p%40ss@db:5432/app?sslmode=require&application_name=x', {});
    expect(d.connectionString).toBe('postgres://u:p%40ss@db:5432/app?application_name=x');
    expect(d.ssl).toEqual({ rejectUnauthorized: false });
  });

  it("sslrootcert=system: verify-full by default and against the system's CAs; a weaker mode is refused, as libpq does", () => {
    expect(driverTls('postgres://db/app?sslrootcert=system', {})).toEqual({
      connectionString: 'postgres://db/app',
      ssl: {},
    });
    expect(driverTls('postgres://db/app', { PGSSLROOTCERT: 'system' }).ssl).toEqual({});
    for (const mode of ['require', 'verify-ca', 'prefer', 'disable']) {
      expect(() => driverTls(`postgres://db/app?sslmode=${mode}&sslrootcert=system`, {})).toThrow(
        `sslmode=${mode} cannot be used with sslrootcert=system; use sslmode=verify-full`,
      );
    }
  });

  it('drops a leftover ssl= from the string: pg would read it over sslmode', () => {
    const d = driverTls('postgres://db/app?ssl=true&sslmode=disable', {});
    expect(d).toEqual({ connectionString: 'postgres://db/app', ssl: false });
  });

  it('moves sslnegotiation out with the TLS keywords, so pg cannot turn it into ssl=true', () => {
    const d = driverTls('postgres://db/app?sslmode=require&sslnegotiation=direct', {});
    expect(d).toEqual({
      connectionString: 'postgres://db/app',
      ssl: { rejectUnauthorized: false },
      sslnegotiation: 'direct',
    });
  });

  it.each([
    ['disable', false],
    ['allow', false],
    ['prefer', { rejectUnauthorized: false }],
    ['require', { rejectUnauthorized: false }],
    ['verify-full', {}],
  ])('sslmode=%s without a root certificate', (mode, ssl) => {
    expect(driverTls(`postgres://db/app?sslmode=${mode}`, {}).ssl).toEqual(ssl);
  });

  it('with a root certificate, require and verify-ca check the chain but not the host name; verify-full checks both', () => {
    for (const mode of ['require', 'verify-ca']) {
      const ssl = driverTls(`postgres://db/app?sslmode=${mode}&sslrootcert=${ca}`, {}).ssl as Record<string, unknown>;
      expect(ssl.ca).toContain('BEGIN CERTIFICATE');
      expect(ssl.rejectUnauthorized).toBeUndefined();
      expect(typeof ssl.checkServerIdentity).toBe('function');
    }
    const full = driverTls(`postgres://db/app?sslmode=verify-full&sslrootcert=${ca}`, {}).ssl as Record<
      string,
      unknown
    >;
    expect(full.ca).toContain('BEGIN CERTIFICATE');
    expect(full.checkServerIdentity).toBeUndefined();
  });

  it('the string wins over PGSSLMODE; PGSSLROOTCERT fills in; no string at all reads the variables', () => {
    expect(driverTls('postgres://db/app?sslmode=disable', { PGSSLMODE: 'verify-full' }).ssl).toBe(false);
    const filled = driverTls('postgres://db/app?sslmode=verify-ca', { PGSSLROOTCERT: ca }).ssl as Record<
      string,
      unknown
    >;
    expect(filled.ca).toContain('BEGIN CERTIFICATE');
    expect(driverTls(undefined, { PGSSLMODE: 'require' })).toEqual({
      connectionString: undefined,
      ssl: { rejectUnauthorized: false },
    });
    // An empty variable says nothing, as with libpq.
    expect(driverTls(undefined, { PGSSLMODE: '' })).toEqual({ connectionString: undefined });
  });

  it.each([
    [
      'postgres://db/app?sslmode=Require',
      'Expected sslmode to be one of disable, allow, prefer, require, verify-ca, verify-full, got "Require".',
    ],
    [
      'postgres://db/app?sslmode=verify-ca',
      "sslmode=verify-ca needs sslrootcert (the CA that signed the server's certificate); use verify-full to verify the host name against the system's CAs.",
    ],
    [
      'postgres://db/app?sslmode=require&sslcert=/nonexistent.crt',
      'Cannot read sslcert "/nonexistent.crt" (ENOENT); give a readable PEM file (PGSSLCERT or sslcert= in the connection string).',
    ],
  ])('%s is a usage error', (url, message) => {
    expect(() => driverTls(url, {})).toThrow(UsageError);
    expect(() => driverTls(url, {})).toThrow(message);
  });
});
