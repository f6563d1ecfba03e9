// Database connection settings: where the URL comes from, its checks before connecting, the
// secrets it holds, a loggable form, and the password file's warnings. No driver here: pg loads with the store.
import { UsageError } from '../../errors.js';
import { driverTls, type DriverTls } from './tls.js';
import { readUrlFile } from './url-file.js';

export interface ConnectionSource {
  /** What to hand to pg: a URL, or undefined to let pg read PGHOST, PGUSER, ... */
  connectionString: string | undefined;
  /** Where it came from, for logs and errors (never the URL itself). */
  from:
    | '--database-url'
    | '--database-url-file'
    | 'LEASEJOB_DATABASE_URL'
    | 'LEASEJOB_DATABASE_URL_FILE'
    | 'DATABASE_URL'
    | 'PG environment';
  /** What pg is given: the string without its TLS keywords, and the TLS they mean (libpq's reading). */
  driver?: DriverTls;
}

/**
 * Where the connection comes from: `--database-url` or `--database-url-file`, else
 * LEASEJOB_DATABASE_URL or LEASEJOB_DATABASE_URL_FILE, else DATABASE_URL, else the libpq
 * variables. A file (a Kubernetes Secret volume, the official database images' `_FILE`
 * convention) keeps the URL out of leasejob's command line and environment, which processes of
 * the same user (the child) can read in /proc.
 */
export function resolveConnection(
  flag: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
  fileFlag?: string,
): ConnectionSource {
  if (flag !== undefined && fileFlag !== undefined)
    throw new UsageError('Expected one of `--database-url` and `--database-url-file`, got both.');
  if (env.LEASEJOB_DATABASE_URL && env.LEASEJOB_DATABASE_URL_FILE && flag === undefined && fileFlag === undefined)
    throw new UsageError('Expected one of LEASEJOB_DATABASE_URL and LEASEJOB_DATABASE_URL_FILE, got both.');
  const source: ConnectionSource =
    flag !== undefined
      ? checked({ connectionString: flag, from: '--database-url' }, env)
      : fileFlag !== undefined
        ? checked(
            { connectionString: readUrlFile(fileFlag, '`--database-url-file`'), from: '--database-url-file' },
            env,
          )
        : env.LEASEJOB_DATABASE_URL
          ? checked({ connectionString: env.LEASEJOB_DATABASE_URL, from: 'LEASEJOB_DATABASE_URL' }, env)
          : env.LEASEJOB_DATABASE_URL_FILE
            ? checked(
                {
                  connectionString: readUrlFile(env.LEASEJOB_DATABASE_URL_FILE, 'LEASEJOB_DATABASE_URL_FILE'),
                  from: 'LEASEJOB_DATABASE_URL_FILE',
                },
                env,
              )
            : env.DATABASE_URL
              ? checked({ connectionString: env.DATABASE_URL, from: 'DATABASE_URL' }, env)
              : checkedEnvironment(env);
  return { ...source, driver: driverTls(source.connectionString, env) };
}

// A postgres:// URL or a libpq key=value string; anything else is a typo, said before connecting.
function checked(source: ConnectionSource, env: NodeJS.ProcessEnv): ConnectionSource {
  const value = source.connectionString ?? '';
  const name = source.from.startsWith('--') ? `\`${source.from}\`` : source.from;
  if (/^postgres(ql)?:\/\//i.test(value)) {
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      throw new UsageError(
        `Expected ${name} to be a valid postgres:// URL, got one that does not parse (special ` +
          `characters in the password must be percent-encoded).`,
      );
    }
    checkOptionNames(url.searchParams.entries(), name);
    checkEnvOptions(new Set(url.searchParams.keys()), env);
    if (url.port === '') checkPort(env.PGPORT, 'PGPORT');
    return source;
  }
  if (/^\s*\w+\s*=/.test(value)) {
    const keywords = parseKeywords(value, name);
    checkOptionNames(keywords.entries(), name);
    checkEnvOptions(new Set(keywords.keys()), env);
    checkPort(keywords.get('port') ?? env.PGPORT, keywords.has('port') ? `port= in ${name}` : 'PGPORT');
    return { ...source, connectionString: keywordsToUrl(keywords) };
  }
  const got =
    value.trim() === ''
      ? 'an empty string'
      : /^[a-z][a-z0-9+.-]*:\/\//i.test(value)
        ? `a ${value.slice(0, value.indexOf(':'))}:// URL`
        : 'something else';
  throw new UsageError(
    `Expected ${name} to be a URL like postgres://user@host:5432/db (the password in it or in ` +
      `PGPASSWORD), got ${got}.`,
  );
}

/** libpq's connection keywords (PostgreSQL 18), and node-postgres's own `ssl` and `uselibpqcompat`. */
const KNOWN_OPTIONS = new Set([
  'host',
  'hostaddr',
  'port',
  'dbname',
  'user',
  'password',
  'passfile',
  'require_auth',
  'channel_binding',
  'connect_timeout',
  'client_encoding',
  'options',
  'application_name',
  'fallback_application_name',
  'keepalives',
  'keepalives_idle',
  'keepalives_interval',
  'keepalives_count',
  'tcp_user_timeout',
  'replication',
  'gssencmode',
  'sslmode',
  'requiressl',
  'sslnegotiation',
  'sslcompression',
  'sslcert',
  'sslkey',
  'sslkeylogfile',
  'sslpassword',
  'sslcertmode',
  'sslrootcert',
  'sslcrl',
  'sslcrldir',
  'sslsni',
  'requirepeer',
  'ssl_min_protocol_version',
  'ssl_max_protocol_version',
  'min_protocol_version',
  'max_protocol_version',
  'krbsrvname',
  'gsslib',
  'gssdelegation',
  'service',
  'target_session_attrs',
  'load_balance_hosts',
  'scram_client_key',
  'scram_server_key',
  'oauth_issuer',
  'oauth_client_id',
  'oauth_client_secret',
  'oauth_scope',
  'ssl',
  'uselibpqcompat',
]);

/**
 * libpq keywords node-postgres does not act on, where ignoring them would connect elsewhere or
 * less safely than psql does with the same string: refused (exit 64), saying why.
 */
const NO_REVOCATION =
  'node-postgres does not check certificate revocation lists, so a revoked server certificate ' +
  'would be accepted; leave it out only knowing that.';
const UNSUPPORTED_OPTIONS: Record<string, string> = {
  service:
    'leasejob (node-postgres) does not read pg_service.conf, so it would connect elsewhere than ' +
    'psql does; give host, port, dbname and user instead.',
  sslcrl: NO_REVOCATION,
  sslcrldir: NO_REVOCATION,
  require_auth:
    'node-postgres answers whichever authentication the server asks for, so a server asking for a ' +
    'plain password would get it; leave it out, with sslmode=verify-full so that only the real ' +
    'server can ask.',
  requirepeer:
    'node-postgres does not check which user runs the server on a Unix socket; leave it out only knowing that.',
};

/** Values of libpq keywords node-postgres cannot honour, refused as above; other values pass. */
const UNSUPPORTED_VALUES: Record<string, { value: string; why: string }> = {
  channel_binding: {
    value: 'require',
    why:
      'node-postgres falls back to SCRAM without channel binding when the server does not offer it, ' +
      'so it cannot require it; use sslmode=verify-full.',
  },
  gssencmode: {
    value: 'require',
    why: 'node-postgres has no GSSAPI encryption and would connect unencrypted; use sslmode=verify-full.',
  },
};

/** Keywords whose empty value asks libpq for nothing: not refused then. */
const EMPTY_ASKS_NOTHING = new Set(['require_auth', 'requirepeer']);

/** The environment variables libpq reads for those keywords when the connection string leaves them out. */
const UNSUPPORTED_ENV: Record<string, string> = {
  require_auth: 'PGREQUIREAUTH',
  requirepeer: 'PGREQUIREPEER',
  channel_binding: 'PGCHANNELBINDING',
  gssencmode: 'PGGSSENCMODE',
};

/**
 * A misspelt option is refused (exit 64), as psql refuses it: pg ignores what it does not know,
 * so `sslmod=verify-full` would connect without TLS. Refused: any unknown name starting with
 * `ssl`, and any within two edits of a libpq keyword (one for short names). Other names pass,
 * as before: a DATABASE_URL shared with an application may carry its own (Prisma's `schema`,
 * `connection_limit`, `pgbouncer`), which pg ignores.
 */
function checkOptionNames(options: Iterable<[string, string]>, source: string): void {
  const shared =
    source === 'DATABASE_URL'
      ? ' (DATABASE_URL may be shared with a program that needs it: give leasejob its own LEASEJOB_DATABASE_URL.)'
      : '';
  for (const [name, value] of options) {
    const unsupported = UNSUPPORTED_OPTIONS[name];
    if (unsupported !== undefined && !(value === '' && EMPTY_ASKS_NOTHING.has(name)))
      throw new UsageError(
        `connection option "${name}" in ${source} is not supported: ${unsupported} Nothing was connected.${shared}`,
      );
    const refused = UNSUPPORTED_VALUES[name];
    if (refused !== undefined && value.toLowerCase() === refused.value)
      throw new UsageError(
        `connection option ${name}=${value} in ${source} is not supported: ${refused.why} Nothing was connected.${shared}`,
      );
    if (KNOWN_OPTIONS.has(name)) continue;
    const lower = name.toLowerCase();
    let near: string | undefined;
    let nearest = Infinity;
    for (const k of KNOWN_OPTIONS) {
      const d = editDistance(lower, k);
      if (d <= (k.length >= 6 ? 2 : 1) && d < nearest) [near, nearest] = [k, d];
    }
    if (near === undefined && !lower.startsWith('ssl')) continue;
    const hint =
      near !== undefined
        ? `did you mean "${near}"?`
        : "it is not one of libpq's TLS keywords (sslmode, sslrootcert, sslcert, sslkey, ...).";
    throw new UsageError(`invalid connection option "${name}" in ${source}: ${hint} Nothing was connected.${shared}`);
  }
}

/** No connection string: libpq's PG* variables say everything. */
function checkedEnvironment(env: NodeJS.ProcessEnv): ConnectionSource {
  checkEnvOptions(new Set(), env);
  checkPort(env.PGPORT, 'PGPORT');
  return { connectionString: undefined, from: 'PG environment' };
}

/**
 * libpq reads require_auth, requirepeer, channel_binding and gssencmode from the environment
 * when the connection string leaves them out (`given`: the string's keywords); node-postgres
 * does not: refused as in a string.
 */
function checkEnvOptions(given: ReadonlySet<string>, env: NodeJS.ProcessEnv): void {
  for (const [name, variable] of Object.entries(UNSUPPORTED_ENV)) {
    const value = env[variable];
    if (!value || given.has(name)) continue;
    const why =
      UNSUPPORTED_OPTIONS[name] ??
      (UNSUPPORTED_VALUES[name]?.value === value.toLowerCase() ? UNSUPPORTED_VALUES[name]!.why : undefined);
    if (why !== undefined)
      throw new UsageError(
        `${variable}=${value} is set, and is not supported: ${why} Unset it to connect. Nothing was connected.`,
      );
  }
}

/** A port the driver would hand to Node's socket as it is (`PGPORT=abc` made a RangeError of Node's): 1 to 65535. */
function checkPort(value: string | undefined, name: string): void {
  if (value === undefined || value === '') return;
  const port = /^\s*\d+\s*$/.test(value) ? Number(value) : NaN;
  if (!(port >= 1 && port <= 65535))
    throw new UsageError(`Expected ${name} to be a port number from 1 to 65535, got ${JSON.stringify(value)}.`);
}

/** Levenshtein distance, for the names of connection options. */
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++)
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[b.length]!;
}

/**
 * A libpq keyword/value string (`host=db port=5432 user=app password='a b' dbname=app`), as
 * libpq reads it: whitespace between pairs, values optionally single-quoted, `\\` escapes.
 */
export function parseKeywords(text: string, name = 'the connection string'): Map<string, string> {
  const out = new Map<string, string>();
  let i = 0;
  const bad = (what: string): never => {
    throw new UsageError(`Expected ${name} to be a postgres:// URL or libpq keyword=value pairs; ${what}.`);
  };
  const skipSpace = (): void => {
    while (i < text.length && /\s/.test(text[i]!)) i++;
  };
  for (;;) {
    skipSpace();
    if (i >= text.length) break;
    const key = /^\w+/.exec(text.slice(i))?.[0] ?? bad(`expected a keyword at character ${i + 1}`);
    i += key.length;
    skipSpace();
    if (text[i] !== '=') bad(`missing "=" after ${key}`);
    i++;
    skipSpace();
    let v = '';
    if (text[i] === "'") {
      for (i++; ; i++) {
        if (i >= text.length) bad(`unterminated quoted value for ${key}`);
        if (text[i] === '\\' && i + 1 < text.length) v += text[++i];
        else if (text[i] === "'") break;
        else v += text[i];
      }
      i++;
    } else {
      for (; i < text.length && !/\s/.test(text[i]!); i++)
        v += text[i] === '\\' && i + 1 < text.length ? text[++i] : text[i];
    }
    out.set(key, v); // case-sensitive, as libpq's keywords are
  }
  return out;
}

/** The same settings as the postgres:// URL pg reads; the keywords pg has no place for go to the query. */
function keywordsToUrl(k: Map<string, string>): string {
  const enc = encodeURIComponent;
  const host = k.get('host') || k.get('hostaddr') || 'localhost';
  const hostPart = host.startsWith('/') ? enc(host) : host.includes(':') ? `[${host}]` : host;
  const user = k.get('user');
  const password = k.get('password');
  const auth = user !== undefined ? `${enc(user)}${password !== undefined ? `:${enc(password)}` : ''}@` : '';
  const port = k.get('port') ? `:${k.get('port')}` : '';
  const params = new URLSearchParams();
  for (const [key, v] of k)
    if (!['host', 'hostaddr', 'user', 'password', 'port', 'dbname'].includes(key)) params.set(key, v);
  const query = params.size ? `?${params}` : '';
  return `postgres://${auth}${hostPart}${port}/${enc(k.get('dbname') ?? user ?? '')}${query}`;
}

/** Every secret that could leak through a message: the URL's password and PGPASSWORD. */
export function secretsOf(source: ConnectionSource, env: NodeJS.ProcessEnv = process.env): string[] {
  const secrets: string[] = [];
  if (source.connectionString) {
    try {
      const url = new URL(source.connectionString);
      if (url.password) {
        secrets.push(url.password);
        // A malformed escape (`%zz`) is accepted by URL but not by decodeURIComponent: the raw
        // password above must be hidden whatever happens here.
        try {
          secrets.push(decodeURIComponent(url.password));
        } catch {
          // The raw form is what the driver and messages show.
        }
      }
    } catch {
      // Not a URL (key=value form): hide password=... below, and the whole string.
      const m = /password\s*=\s*'?([^'\s]+)/i.exec(source.connectionString);
      if (m?.[1]) secrets.push(m[1]);
    }
  }
  if (env.PGPASSWORD) secrets.push(env.PGPASSWORD);
  // As a JSON log line carries it: a quote or a backslash in the password comes escaped.
  for (const s of [...secrets]) secrets.push(JSON.stringify(s).slice(1, -1));
  return [...new Set(secrets.filter((s) => s.length > 0))];
}

/** A URL safe to log: user, host, port, database; never the password. */
export function describeConnection(source: ConnectionSource): string {
  if (!source.connectionString) return `${process.env.PGHOST ?? 'localhost'} (${source.from})`;
  try {
    const url = new URL(source.connectionString);
    if (url.password) url.password = '***';
    return `${url.protocol}//${url.username ? url.username + (url.password ? ':***' : '') + '@' : ''}${url.host}${url.pathname}`;
  } catch {
    return `(unparsed connection string from ${source.from})`;
  }
}

/**
 * Where the password-file reader's warning goes (a file others may read is ignored, as libpq
 * does). Commands point it at their logger, so stderr stays JSON lines; unset (a program using
 * the library), it is written to stderr as it is.
 */
export const passwordFileWarnings = {
  /** Where warnings go; unset, to stderr as they are. */
  to: undefined as ((message: string) => void) | undefined,
  /** Warnings that came while held, for the next `sendTo`. */
  held: undefined as string[] | undefined,
  /** Keep warnings until sendTo() (a command whose logger is not made yet). */
  hold(): void {
    this.held ??= [];
  },
  /** Send warnings, those held included, to `fn`. */
  sendTo(fn: (message: string) => void): void {
    this.to = fn;
    const held = this.held ?? [];
    this.held = undefined;
    for (const m of held) fn(m);
  },
  warn(message: string): void {
    if (this.to) this.to(message);
    else if (this.held) this.held.push(message);
    else process.stderr.write(`WARNING: ${message}\n`);
  },
};
