// JS twin of test/helpers/proxy.ts for the bench (plain node, no TS loader), plus a second way
// to cut: 'reset' (RST every connection, refuse new ones: what proxy.ts does) or 'blackhole'
// (keep the sockets open but drop every byte both ways and hold new connections unanswered:
// a partition, where only client-side timeouts notice).
import net from 'node:net';

/**
 * @param {string} targetUrl postgres:// URL of the real server
 * @returns {Promise<{ port: number, cut(mode?: 'reset'|'blackhole'): void, heal(): void, close(): Promise<void>, url(t: string): string }>}
 */
export async function startProxy(targetUrl) {
  const target = new URL(targetUrl);
  /** @type {Set<net.Socket>} */
  const sockets = new Set();
  /** @type {'open'|'reset'|'blackhole'} */
  let state = 'open';
  const server = net.createServer((client) => {
    if (state === 'reset') {
      client.resetAndDestroy();
      return;
    }
    sockets.add(client);
    client.on('error', () => {}).on('close', () => sockets.delete(client));
    if (state === 'blackhole') {
      client.on('data', () => {}); // swallow, never answer
      return;
    }
    const upstream = net.connect(Number(target.port), target.hostname);
    sockets.add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', drop);
    upstream.on('error', drop).on('close', drop);
    // Forward by hand (not pipe) so that a black hole can stop forwarding without closing.
    client.on('data', (d) => {
      if (state === 'open') upstream.write(d);
    });
    upstream.on('data', (d) => {
      if (state === 'open') client.write(d);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = /** @type {net.AddressInfo} */ (server.address()).port;
  return {
    port,
    cut(mode = 'reset') {
      state = mode;
      if (mode === 'reset') {
        for (const s of sockets) s.resetAndDestroy();
        sockets.clear();
      }
    },
    heal() {
      // Bytes were dropped on the held connections: they are out of protocol sync, close them.
      if (state === 'blackhole') {
        for (const s of sockets) s.destroy();
        sockets.clear();
      }
      state = 'open';
    },
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        sockets.clear();
        server.close(() => resolve());
      }),
    url(t) {
      const u = new URL(t);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
  };
}
