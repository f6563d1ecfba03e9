// A real HTTP endpoint on 127.0.0.1 for --ping-url and --notify-url: records every request,
// answers 200 OK (or, `silent`, never answers). Bodies are decoded as strict UTF-8, as
// healthchecks.io does: one that is not is answered 500 (the ping is lost there too), and its
// `text` is null; with `binary` (an OTLP collector taking protobuf) it is answered 200 all the same.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  /** The body decoded as strict UTF-8 (TextDecoder with fatal: true); null when it is not UTF-8. */
  text: string | null;
  /** When the whole body had arrived (ms since the epoch). */
  receivedAt: number;
}

const strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
function strictText(body: Buffer): string | null {
  try {
    return strict.decode(body);
  } catch {
    return null;
  }
}

export interface Receiver {
  url: string;
  requests: ReceivedRequest[];
  close(): Promise<void>;
}

export async function startReceiver(opts: { silent?: boolean; binary?: boolean } = {}): Promise<Receiver> {
  const requests: ReceivedRequest[] = [];
  const sockets = new Set<import('node:net').Socket>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const u = new URL(req.url ?? '/', 'http://x');
      const body = Buffer.concat(chunks);
      const text = strictText(body);
      requests.push({
        method: req.method ?? '',
        path: u.pathname,
        query: u.searchParams,
        headers: req.headers,
        body,
        text,
        receivedAt: Date.now(),
      });
      const refused = text === null && !opts.binary;
      if (!opts.silent) res.writeHead(refused ? 500 : 200).end(refused ? 'body is not UTF-8' : 'OK');
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
