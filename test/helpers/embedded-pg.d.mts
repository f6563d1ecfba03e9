export function startEmbeddedPostgres(opts?: { port?: number }): Promise<{
  url: string;
  port: number;
  stop: () => Promise<void>;
  restart: (mode?: 'fast' | 'immediate') => Promise<void>;
}>;
