// TLS to PostgreSQL as libpq reads sslmode, through a real TLS endpoint in front of the test
// server: require encrypts without verifying, verify-ca checks the chain, verify-full the chain
// and the host; a chain or host that does not verify is exit 69; pg's own warning never shows.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, runCli } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { startTlsProxy, type TlsProxy } from '../helpers/tls-proxy.mjs';

const certs = fixture('tls');
const pem = (name: string): string => readFileSync(`${certs}/${name}`, 'utf8');

let db: TestDb;
let byIp: TlsProxy; // certificate for IP 127.0.0.1
let byName: TlsProxy; // certificate for db.example.invalid only
beforeAll(async () => {
  db = await testDb();
  const target = new URL(db.url);
  const to = { host: target.hostname, port: Number(target.port || 5432) };
  byIp = await startTlsProxy({ ...to, cert: pem('server-ip.pem'), key: pem('server-ip-key.pem') });
  byName = await startTlsProxy({ ...to, cert: pem('server-name.pem'), key: pem('server-name-key.pem') });
});
afterAll(async () => {
  await byIp?.close();
  await byName?.close();
  await db?.close();
});

function through(proxy: TlsProxy, params: Record<string, string>): string {
  const url = new URL(db.url);
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  return url.toString();
}

async function status(url: string, env: Record<string, string> = {}) {
  return runCli(['status', '--database-url', url, '--schema', db.schema], env);
}

describe('sslmode, as libpq reads it', () => {
  it.each([
    ['require: encrypted, the certificate not checked', byIpOf, { sslmode: 'require' }],
    ['prefer: encrypted when the server offers it', byIpOf, { sslmode: 'prefer' }],
    [
      'verify-ca: the chain checked, not the host name',
      byNameOf,
      { sslmode: 'verify-ca', sslrootcert: `${certs}/ca.pem` },
    ],
    ['verify-full: chain and host name', byIpOf, { sslmode: 'verify-full', sslrootcert: `${certs}/ca.pem` }],
    [
      'require with a root certificate: the chain checked',
      byNameOf,
      { sslmode: 'require', sslrootcert: `${certs}/ca.pem` },
    ],
  ])('%s: connects, over TLS, with no warning', async (_what, proxyOf, params) => {
    const proxy = proxyOf();
    const before = proxy.handshakes();
    const r = await status(through(proxy, params));
    expect(r.exitCode, r.all).toBe(0);
    expect(proxy.handshakes()).toBeGreaterThan(before);
    expect(r.stderr).not.toMatch(/SECURITY WARNING|Warning/);
  });

  it.each([
    ['verify-full against a CA not trusted', byIpOf, { sslmode: 'verify-full' }, /self-signed|unable to (get|verify)/i],
    [
      'verify-full with the host name not in the certificate',
      byNameOf,
      { sslmode: 'verify-full', sslrootcert: `${certs}/ca.pem` },
      /altnames|host ?name/i,
    ],
    [
      'verify-ca with another CA',
      byNameOf,
      { sslmode: 'verify-ca', sslrootcert: `${certs}/other-ca.pem` },
      /self-signed|unable to (get|verify)/i,
    ],
    [
      'require with another root certificate',
      byIpOf,
      { sslmode: 'require', sslrootcert: `${certs}/other-ca.pem` },
      /self-signed|unable to (get|verify)/i,
    ],
  ])('%s: exit 69, one line naming TLS', async (_what, proxyOf, params, why) => {
    const url = through(proxyOf(), params);
    const r = await status(url);
    expect(r.exitCode, r.all).toBe(69);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^leasejob: TLS to .* failed: .*check sslmode and sslrootcert/);
    expect(r.stderr).toMatch(why);
    expect(r.stderr).not.toContain(new URL(db.url).password || 'never-empty');
  });

  it('PGSSLMODE and PGSSLROOTCERT fill in what the URL does not say', async () => {
    const ok = await status(through(byName, {}), { PGSSLMODE: 'verify-ca', PGSSLROOTCERT: `${certs}/ca.pem` });
    expect(ok.exitCode, ok.all).toBe(0);
    const refused = await status(through(byName, {}), { PGSSLMODE: 'verify-full', PGSSLROOTCERT: `${certs}/ca.pem` });
    expect(refused.exitCode, refused.all).toBe(69);
    // The URL's keyword wins over the variable.
    const url = await status(through(byName, { sslmode: 'verify-ca' }), {
      PGSSLMODE: 'verify-full',
      PGSSLROOTCERT: `${certs}/ca.pem`,
    });
    expect(url.exitCode, url.all).toBe(0);
  });

  it('sslmode=disable never asks for TLS: refused by a TLS-only endpoint, accepted by the plain server', async () => {
    const viaProxy = await status(through(byIp, { sslmode: 'disable' }));
    expect(viaProxy.exitCode, viaProxy.all).toBe(69);
    const plain = new URL(db.url);
    plain.searchParams.set('sslmode', 'disable');
    const direct = await status(plain.toString(), { PGSSLMODE: 'require' });
    expect(direct.exitCode, direct.all).toBe(0);
  });

  it.each([
    [
      'an unknown sslmode',
      { sslmode: 'sometimes' },
      /^leasejob: Expected sslmode to be one of disable, allow, prefer, require, verify-ca, verify-full, got "sometimes"\.$/,
    ],
    ['verify-ca without a CA', { sslmode: 'verify-ca' }, /^leasejob: sslmode=verify-ca needs sslrootcert/],
    [
      'a root certificate that is not there',
      { sslmode: 'verify-full', sslrootcert: '/nonexistent/root.crt' },
      /^leasejob: Cannot read sslrootcert "\/nonexistent\/root.crt" \(ENOENT\)/,
    ],
  ])('%s: exit 64, one line, nothing tried', async (_what, params, message) => {
    const before = byIp.handshakes();
    const r = await status(through(byIp, params));
    expect(r.exitCode, r.all).toBe(64);
    expect(r.stderr.trim()).toMatch(message);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(byIp.handshakes()).toBe(before);
  });

  it('run over require: the child runs, and --pass-database-url hands it the URL as given', async () => {
    const url = through(byIp, { sslmode: 'require' });
    const r = await runCli([
      'run',
      '--name',
      'tls-run',
      '--window',
      'w1',
      '--database-url',
      url,
      '--schema',
      db.schema,
      '--pass-database-url',
      '--',
      process.execPath,
      '-e',
      'process.stdout.write(process.env.DATABASE_URL ?? "none")',
    ]);
    expect(r.exitCode, r.all).toBe(0);
    expect(r.stdout).toBe(url);
    const rows = await db.rows<{ outcome: string }>(`SELECT outcome FROM ${db.schema}.windows WHERE job = $1`, [
      'tls-run',
    ]);
    expect(rows.map((x) => x.outcome)).toEqual(['completed']);
  });
});

function byIpOf(): TlsProxy {
  return byIp;
}
function byNameOf(): TlsProxy {
  return byName;
}
