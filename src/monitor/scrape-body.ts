// The exposition as /metrics sends it: encoded once per read of the store, and gzipped once
// when a scraper asks for it (Prometheus does), however many requests that read answers.
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';

const gzipAsync = promisify(gzip);

export class ScrapeBody {
  /** The UTF-8 bytes, shared by every request the read answers (not encoded again per request). */
  readonly plain: Buffer;
  private gzipped: Promise<Buffer> | undefined;

  constructor(readonly text: string) {
    this.plain = Buffer.from(text, 'utf8');
  }

  /** The gzip of the bytes, made by the first request that asks and shared by the others. */
  gzip(): Promise<Buffer> {
    return (this.gzipped ??= gzipAsync(this.plain));
  }
}

/** Whether an Accept-Encoding header takes gzip (`gzip`, `gzip;q=0.5`, `*`; not `gzip;q=0`). */
export function acceptsGzip(header: string | undefined): boolean {
  if (!header) return false;
  return header.split(',').some((part) => {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (name !== 'gzip' && name !== '*') return false;
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    return q === undefined || Number(q.slice(2)) > 0;
  });
}
