// A TCP proxy in front of the test PostgreSQL that a test can cut (the database "goes away").
import net from 'node:net';

export interface Proxy {
  port: number;
  /** Reset every open connection and refuse new ones. */
  cut(): void;
  /** Hold new connections without an answer (a black hole) until heal(). */
  hold(): void;
  /** Accept and forward again. */
  heal(): void;
  close(): Promise<void>;
  /** The same URL with host and port replaced by the proxy's. */
  url(target: string): string;
}

export async function startProxy(targetUrl: string): Promise<Proxy> {
  const target = new URL(targetUrl);
  const sockets = new Set<net.Socket>();
  let open = true;
  let holding = false;
  const held: net.Socket[] = [];
  const forward = (client: net.Socket): void => {
    const upstream = net.connect(Number(target.port), target.hostname);
    sockets.add(client).add(upstream);
    const drop = (): void => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream).pipe(client);
    client.resume();
  };
  const server = net.createServer({ pauseOnConnect: true }, (client) => {
    if (!open) {
      client.resetAndDestroy();
      return;
    }
    if (holding) {
      held.push(client);
      return;
    }
    forward(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    cut() {
      open = false;
      for (const s of sockets) s.resetAndDestroy();
      sockets.clear();
    },
    hold() {
      holding = true;
    },
    heal() {
      open = true;
      holding = false;
      for (const c of held.splice(0)) if (!c.destroyed) forward(c);
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of [...sockets, ...held]) s.destroy();
        server.close(() => resolve());
      }),
    url(t: string) {
      const u = new URL(t);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
  };
}
