export function pgbouncerBinary(): string | undefined;
export interface PgbouncerOptions {
  binary: string;
  target: string | URL;
  authType: 'trust' | 'plain' | 'scram-sha-256';
  poolSize: number;
  alias?: string;
  serverCredentials?: boolean;
  extraIni?: string[];
  startTimeoutMs?: number;
}
export interface Pgbouncer {
  url: string;
  log: () => string;
  stop: () => Promise<void>;
}
export function startPgbouncer(opts: PgbouncerOptions): Promise<Pgbouncer>;
