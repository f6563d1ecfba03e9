// The connection pool: pg's, with leasejob's settings, and the password file read through the
// password callback pg asks (no DeprecationWarning on stderr).
import { Writable } from 'node:stream';
import pg from 'pg';
import type pgpass from 'pgpass';
import { monoNow } from '../../clock.js';
import { passwordFileWarnings, type ConnectionSource } from './connection.js';
import { driverTls } from './tls.js';

export interface PoolOptions {
  /**
   * Default 2. A runner uses one connection (its statements come one after another, and
   * renewals reuse the session whose pid the lease records); the second is opened only while
   * a statement waits on a connection gone silent, so finishing does not queue behind it.
   */
  max?: number;
  connectTimeoutMs?: number;
}

export function createPool(source: ConnectionSource, opts: PoolOptions = {}): pg.Pool {
  const driver = source.driver ?? driverTls(source.connectionString, process.env);
  const config: pg.PoolConfig = {
    ...(driver.connectionString ? { connectionString: driver.connectionString } : {}),
    ...(driver.ssl !== undefined ? { ssl: driver.ssl } : {}),
    ...(driver.sslnegotiation !== undefined ? { sslnegotiation: driver.sslnegotiation } : {}),
    max: opts.max ?? 2,
    // Keep the idle connection between renewals: its backend pid is the holder's liveness signal.
    idleTimeoutMillis: 0,
    connectionTimeoutMillis: opts.connectTimeoutMs ?? 5_000,
    keepAlive: true,
    application_name: 'leasejob',
    Client: PasswordFileClient,
  };
  const pool = new pg.Pool(config);
  // An idle client losing its server (restart, partition) must not crash the process; the next
  // query reconnects and renewal failures are handled by the lease keeper.
  pool.on('error', () => {});
  return pool;
}

/**
 * A client that reads ~/.pgpass (or PGPASSFILE) itself when no password was given, as pg 8 does,
 * but through the password callback pg asks for: its own reading prints a DeprecationWarning
 * (two lines that are not JSON) on stderr at every connection. Asked only when the server wants
 * a password; the same file, rules and matching (the pgpass package pg uses).
 */
class PasswordFileClient extends pg.Client {
  constructor(config?: pg.ClientConfig) {
    super(config);
    const self = this as unknown as { password: unknown };
    if (self.password == null) self.password = passwordFromFile;
  }
}

/**
 * One reading of the password file serves the connections opened within PASSWORD_FILE_REUSE_MS
 * (status and check open two at once): its warning about a file others may read is said once,
 * and a password changed in the file is still picked up by a long-running exporter.
 */
const PASSWORD_FILE_REUSE_MS = 10_000;
const passwordReadings = new Map<string, { at: number; password: Promise<string | undefined> }>();
function passwordFromFile(params: pgpass.ConnectionInfo): Promise<string | undefined> {
  const key = JSON.stringify([params.host, params.port, params.database, params.user]);
  const recent = passwordReadings.get(key);
  if (recent !== undefined && monoNow() - recent.at < PASSWORD_FILE_REUSE_MS) return recent.password;
  // Loaded then, not at start: most connections carry their password.
  const password = import('pgpass').then(({ default: read }) => {
    read.warnTo(passwordWarningSink());
    return new Promise<string | undefined>((resolve) => read(params, resolve));
  });
  passwordReadings.set(key, { at: monoNow(), password });
  return password;
}

/** Made on first use. pgpass writes each warning as one unterminated `WARNING: ...` string. */
let warningSink: Writable | undefined;
const passwordWarningSink = (): Writable =>
  (warningSink ??= new Writable({
    write(chunk: Buffer | string, _encoding, done): void {
      passwordFileWarnings.warn(
        String(chunk)
          .trim()
          .replace(/^WARNING: /, ''),
      );
      done();
    },
  }));
