// TLS to PostgreSQL as libpq reads `sslmode`, `sslrootcert`, `sslcert` and `sslkey` (from the
// connection string, else PGSSLMODE, PGSSLROOTCERT, PGSSLCERT, PGSSLKEY), turned into the
// options node-postgres takes. pg itself reads prefer, require and verify-ca as verify-full, and
// warns about it on every start; operators write them meaning what psql does.
import { readFileSync } from 'node:fs';
import { UsageError } from '../../errors.js';

/** What node-postgres takes as `ssl` (a subset of node:tls connect options). */
export interface SslOptions {
  rejectUnauthorized?: boolean;
  checkServerIdentity?: () => undefined;
  ca?: string;
  cert?: string;
  key?: string;
}

/** The connection string for pg with the TLS keywords taken out, and the `ssl` they mean. */
export interface DriverTls {
  connectionString: string | undefined;
  /** Absent: nothing about TLS was said, pg's default (no TLS) stands. */
  ssl?: false | SslOptions;
  /** Moved out of the string with the rest: in it, pg would read `direct` as ssl=true and drop `ssl`. */
  sslnegotiation?: 'postgres' | 'direct';
}

const MODES = ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full', 'no-verify'] as const;
type SslMode = (typeof MODES)[number];
const KEYWORDS = {
  sslmode: 'PGSSLMODE',
  sslrootcert: 'PGSSLROOTCERT',
  sslcert: 'PGSSLCERT',
  sslkey: 'PGSSLKEY',
} as const;
type Keyword = keyof typeof KEYWORDS;

/**
 * Reads the TLS settings once, before anything connects: a mode libpq does not know, a
 * certificate file that cannot be read, or verify-ca without a CA is a usage error (exit 64).
 */
export function driverTls(connectionString: string | undefined, env: NodeJS.ProcessEnv): DriverTls {
  const url = connectionString !== undefined ? new URL(connectionString) : undefined;
  // libpq: a keyword in the connection string wins, its environment variable fills in.
  const given = new Map<Keyword, string>();
  let certInString = false;
  for (const k of Object.keys(KEYWORDS) as Keyword[]) {
    // Empty is unset, in the string as in the environment (libpq; a template's empty value).
    const inString = url?.searchParams.get(k) || undefined;
    const value = inString ?? (env[KEYWORDS[k]] || undefined);
    if (value !== undefined) given.set(k, value);
    if (inString !== undefined && k !== 'sslmode') certInString = true;
    url?.searchParams.delete(k);
  }
  // libpq: sslrootcert=system makes verify-full the default, and allows nothing weaker.
  if (given.get('sslrootcert') === 'system' && !given.has('sslmode')) given.set('sslmode', 'verify-full');
  // A certificate named in the string itself, with no sslmode: node-postgres reads that as
  // verify-full, and so do we, through the same checks (a file that cannot be read is a usage
  // error, not pg's ENOENT at connect). The variables alone do not turn TLS on (below).
  if (certInString && !given.has('sslmode')) given.set('sslmode', 'verify-full');
  // No sslmode anywhere: pg's own reading stands, as before (libpq would try TLS, then plain).
  if (!given.has('sslmode')) return { connectionString };
  // pg reads a leftover `ssl=` (a JDBC habit) over the options given beside the string.
  url?.searchParams.delete('ssl');
  const mode = given.get('sslmode')!; // present: checked above
  if (!(MODES as readonly string[]).includes(mode)) {
    throw new UsageError(
      `Expected sslmode to be one of disable, allow, prefer, require, verify-ca, verify-full, got ${JSON.stringify(mode)}.`,
    );
  }
  const sslnegotiation = url?.searchParams.get('sslnegotiation') ?? undefined;
  url?.searchParams.delete('sslnegotiation');
  if (sslnegotiation !== undefined && sslnegotiation !== 'postgres' && sslnegotiation !== 'direct') {
    throw new UsageError(`Expected sslnegotiation to be postgres or direct, got ${JSON.stringify(sslnegotiation)}.`);
  }
  return {
    connectionString: url?.toString(),
    ssl: sslFor(mode as SslMode, (k) => given.get(k)),
    ...(sslnegotiation !== undefined ? { sslnegotiation } : {}),
  };
}

function sslFor(mode: SslMode, get: (k: Keyword) => string | undefined): false | SslOptions {
  const ca = get('sslrootcert');
  // libpq's sslrootcert=system: the system's CAs. Node verifies against its own bundled list
  // (Mozilla's) plus NODE_EXTRA_CA_CERTS, not the OS trust store; with the host name checked. A
  // weaker mode would quietly verify nothing, so libpq refuses it.
  if (ca === 'system' && mode !== 'verify-full') {
    throw new UsageError(
      `sslmode=${mode} cannot be used with sslrootcert=system; use sslmode=verify-full (the default with sslrootcert=system).`,
    );
  }
  // allow: libpq tries without TLS first, which every server that takes plain connections accepts.
  if (mode === 'disable' || mode === 'allow') return false;
  const files: SslOptions = {};
  if (ca !== undefined && ca !== 'system') files.ca = readCertFile('sslrootcert', ca);
  const cert = get('sslcert');
  if (cert !== undefined) files.cert = readCertFile('sslcert', cert);
  const key = get('sslkey');
  if (key !== undefined) files.key = readCertFile('sslkey', key);
  switch (mode) {
    case 'verify-full':
      return files;
    case 'verify-ca':
      if (files.ca === undefined) {
        throw new UsageError(
          "sslmode=verify-ca needs sslrootcert (the CA that signed the server's certificate); use " +
            "verify-full to verify the host name against the system's CAs.",
        );
      }
      return { ...files, checkServerIdentity: () => undefined };
    case 'require':
      // libpq: with a root certificate, require verifies the chain as verify-ca does.
      return files.ca !== undefined
        ? { ...files, checkServerIdentity: () => undefined }
        : { ...files, rejectUnauthorized: false };
    case 'prefer':
    case 'no-verify':
      return { ...files, rejectUnauthorized: false };
  }
}

function readCertFile(keyword: Keyword, file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'unreadable';
    throw new UsageError(
      `Cannot read ${keyword} ${JSON.stringify(file)} (${code}); give a readable PEM file ` +
        `(${KEYWORDS[keyword]} or ${keyword}= in the connection string).`,
    );
  }
}
