export function startEmbeddedPostgres(opts?: {
  port?: number;
  postgresFlags?: string[];
  onLog?: (chunk: string) => void;
}): Promise<{
  url: string;
  port: number;
  stop: () => Promise<void>;
  restart: (mode?: 'fast' | 'immediate') => Promise<void>;
}>;
export function freePort(): Promise<number>;
