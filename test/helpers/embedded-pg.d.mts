export function startEmbeddedPostgres(): Promise<{ url: string; stop: () => Promise<void> }>;
