// PostgreSQL driver errors by what the operator should do: the SQLSTATE classes and codes that
// turn them into DatabaseError (exit 69), and which ones are worth a retry.
import { DatabaseError } from '../../errors.js';
import { redact } from '../../secrets.js';
import { errorCode, isNetworkError } from '../contract.js';

// SQLSTATE classes and codes, grouped by what the operator should do.
/** The server is unreachable, restarting or shutting us down: retry later (exit 69). */
const UNAVAILABLE_CODES = new Set([
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now (starting up, recovery)
  '53300', // too_many_connections
]);
/**
 * The server would not do it, for reasons of its own state rather than ours (exit 69): a
 * read-only server (a standby, also after a failover), a statement cancelled or timed out by
 * its settings, one rolled back on every try (PgStore sends those again), a session ended by
 * its timeouts, no disk or memory, an I/O error.
 */
function serverRefusal(code: string): string | undefined {
  if (code === '25006') return 'the server is read-only (a standby?): point leasejob at the primary';
  if (code === '57014') return 'the server cancelled the statement (statement_timeout, or pg_cancel_backend)';
  if (code === '40001') {
    return (
      'a serialization failure on every try: leasejob needs no more than read committed (is ' +
      'default_transaction_isolation set higher for this role or database?), and on a standby a ' +
      'recovery conflict cancels reads'
    );
  }
  if (code === '40P01')
    return "a deadlock on every try, with another session holding locks leasejob needs (a child's transaction on leasejob's rows?)";
  if (code === '25P03' || code === '25P04')
    return 'the server ended the session (idle_in_transaction_session_timeout or transaction_timeout)';
  if (code.startsWith('53')) return 'the server is out of a resource (disk, memory, connections)';
  if (code.startsWith('57') || code.startsWith('58')) return 'the server stopped the statement';
  return undefined;
}
/** pg's own words when the server asks for a password (SCRAM, md5) and it has none. */
const NO_PASSWORD = /client password must be a string|^Password must be a string/;
/** Our credentials or database name were refused: fix configuration (exit 69). */
const AUTH_CODES = new Set([
  '28000', // invalid_authorization_specification
  '28P01', // invalid_password
  '3D000', // invalid_catalog_name (database does not exist)
]);
/** The schema or its functions are missing: run `leasejob migrate` (exit 69). */
const NOT_MIGRATED_CODES = new Set([
  '3F000', // invalid_schema_name
  '42P01', // undefined_table
  '42883', // undefined_function
]);

/** The server restarting or unreachable, the connection dropped, a query timed out: worth a retry. */
export function isTransientDbError(err: unknown): boolean {
  const code = errorCode(err);
  const raw = err instanceof Error ? err.message : String(err);
  return (
    UNAVAILABLE_CODES.has(code) ||
    code.startsWith('08') ||
    isNetworkError(err) ||
    // A Unix socket not there (yet): the server is not running, or restarting.
    (code === 'ENOENT' && isConnect(err)) ||
    (code === '' && /timeout|terminated/i.test(raw))
  );
}

/**
 * SQLSTATEs after which the server rolled the transaction back: a serialization failure
 * (repeatable read and serializable isolation) and a deadlock. A statement that was its own
 * transaction can be sent again.
 */
const ROLLED_BACK_CODES = new Set(['40001', '40P01']);

export function wasRolledBack(err: unknown): boolean {
  return ROLLED_BACK_CODES.has(errorCode(err));
}

/** leasejob's own bound on a connection or an answer ran out (src/store/postgres/store.ts). */
export function noAnswerWithin(timeoutMs: number, cause?: unknown): Error {
  return Object.assign(new Error(`the database did not answer within ${Math.ceil(timeoutMs)} ms`), {
    code: 'ETIMEDOUT',
    noAnswer: true,
    cause,
  });
}

/** Turn a driver error into a DatabaseError with an actionable, redacted message. */
export function classifyDbError(
  err: unknown,
  ctx: { schema: string; secrets: readonly string[]; target: string; permissionHint?: string | undefined },
): DatabaseError | undefined {
  const code = errorCode(err);
  const raw = redact(err instanceof Error ? err.message : String(err), ctx.secrets);
  if (NOT_MIGRATED_CODES.has(code)) {
    return new DatabaseError(
      `schema "${ctx.schema}" is not migrated on ${ctx.target} (${raw}); run \`leasejob migrate\` first`,
      'E_NOT_MIGRATED',
      { cause: err },
    );
  }
  if (code === '42501') {
    return new DatabaseError(
      `permission denied on ${ctx.target} (${raw}); ` +
        `${ctx.permissionHint ?? 'grant the role with `leasejob migrate --grant-to <role>` as the schema owner'}`,
      'E_DB_PERMISSION',
      { cause: err },
    );
  }
  if (code === '42704' && /role/.test(raw)) {
    return new DatabaseError(`${raw}: create the role first, then \`leasejob migrate --grant-to\` it`, 'E_DB_ROLE', {
      cause: err,
    });
  }
  // The server asked for a password and none was found. Said by the server under `password`
  // authentication; under scram-sha-256 (the default since PostgreSQL 14) pg says it itself,
  // before answering, in a plain Error.
  if ((AUTH_CODES.has(code) && /empty password returned by client/.test(raw)) || NO_PASSWORD.test(raw)) {
    // The server's own words (under `password` authentication) are kept; the driver's, when it
    // had none to offer to SCRAM, are its internals and say nothing more.
    const said = NO_PASSWORD.test(raw) ? '' : ` (${raw})`;
    return new DatabaseError(
      `database refused the connection to ${ctx.target}: it asks for a password and none was found` +
        `${said}; give one in the URL, PGPASSWORD, ~/.pgpass or PGPASSFILE (a password file others may ` +
        `read is ignored: chmod 600 it)`,
      'E_DB_AUTH',
      { cause: err },
    );
  }
  if (AUTH_CODES.has(code)) {
    return new DatabaseError(`database refused the connection to ${ctx.target}: ${raw}`, 'E_DB_AUTH', { cause: err });
  }
  const sasl = saslWords(raw);
  if (sasl !== undefined)
    return new DatabaseError(`database refused the connection to ${ctx.target}: ${sasl}`, 'E_DB_AUTH', { cause: err });
  if (isTlsFailure(err, raw)) {
    return new DatabaseError(
      `TLS to ${ctx.target} failed: ${raw || code}; check sslmode and sslrootcert in the connection settings`,
      'E_DB_TLS',
      { cause: err },
    );
  }
  if (code === 'EACCES' && isConnect(err))
    return new DatabaseError(`database unreachable at ${ctx.target}: ${networkWords(err, raw)}`, 'E_DB_UNREACHABLE', {
      cause: err,
    });
  if (isTransientDbError(err)) {
    // Our own bound: no answer in time is not always no database.
    if ((err as { noAnswer?: unknown }).noAnswer === true) {
      return new DatabaseError(
        `database at ${ctx.target} did not answer in time: ${raw} (unreachable, overloaded, or the ` +
          `statement waiting for a lock: a migration, a long transaction)`,
        'E_DB_UNREACHABLE',
        { cause: err },
      );
    }
    return new DatabaseError(
      `database unreachable at ${ctx.target}: ${networkWords(err, raw) || code}`,
      'E_DB_UNREACHABLE',
      {
        cause: err,
      },
    );
  }
  const refusal = serverRefusal(code);
  if (refusal !== undefined) {
    return new DatabaseError(
      `database at ${ctx.target} refused: ${raw} (SQLSTATE ${code}); ${refusal}`,
      'E_DB_REFUSED',
      { cause: err },
    );
  }
  return undefined;
}

/**
 * The driver's SCRAM exchange failing for another reason than a missing password, in words
 * (pg says `SASL: SCRAM-SERVER-FINAL-MESSAGE: ...`, its own internals); undefined for any other error.
 */
function saslWords(raw: string): string | undefined {
  if (!raw.startsWith('SASL:')) return undefined;
  if (/signature does not match/.test(raw))
    return "the server's proof of the password (SCRAM) does not match: not the server meant, or something between rewrites the exchange";
  if (/Only mechanism|mechanism/i.test(raw))
    return 'the server asks for a password exchange leasejob cannot do (it speaks SCRAM-SHA-256, without channel binding)';
  return 'the password exchange (SCRAM) with the server failed: the server may not be the one meant, or a proxy between alters it';
}

/** Node's errno words (`getaddrinfo ENOTFOUND db`, `connect ECONNREFUSED 10.0.0.5:5432`) in leasejob's, the code kept. */
const NETWORK_WORDS: Record<string, (where: string) => string> = {
  ENOTFOUND: (where) => `no such host name ${where} (DNS)`,
  EAI_AGAIN: (where) => `the host name ${where} could not be looked up now (DNS)`,
  ECONNREFUSED: (where) => `connection refused: nothing listens at ${where}`,
  ECONNRESET: () => 'the connection was reset (the server, or something between, closed it)',
  ETIMEDOUT: (where) => `no answer from ${where} (timed out)`,
  EHOSTUNREACH: (where) => `no route to ${where}`,
  ENETUNREACH: (where) => `the network of ${where} is unreachable`,
  ENOENT: (where) => `no server socket at ${where} (is the server running, and is that its socket directory?)`,
  EACCES: (where) => `not allowed to open ${where}`,
};

/** Node's error for a socket that could not be opened (a Unix socket path missing or not ours). */
const isConnect = (err: unknown): boolean => (err as { syscall?: unknown } | null)?.syscall === 'connect';

function networkWords(err: unknown, raw: string): string {
  const e = (err ?? {}) as { code?: unknown; hostname?: unknown; address?: unknown; port?: unknown };
  const code = typeof e.code === 'string' ? e.code : '';
  const words = NETWORK_WORDS[code];
  if (!words) return raw;
  const host = typeof e.hostname === 'string' ? e.hostname : typeof e.address === 'string' ? e.address : undefined;
  const where =
    host === undefined
      ? 'the server'
      : e.port !== undefined && !host.startsWith('/')
        ? `${host}:${String(e.port)}`
        : host;
  return `${words(where)} (${code})`;
}

/**
 * The server refused TLS that the settings require (pg says so in a plain Error), or its
 * certificate did not verify (Node's TLS codes): the database cannot be used as configured.
 */
function isTlsFailure(err: unknown, message: string): boolean {
  const code = String((err as { code?: unknown } | undefined)?.code ?? '');
  return (
    /does not support SSL connections/.test(message) ||
    /^(ERR_TLS_|ERR_SSL_)/.test(code) ||
    /CERT|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)/.test(code)
  );
}
