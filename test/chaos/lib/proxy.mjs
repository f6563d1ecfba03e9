// A TCP proxy in front of PostgreSQL for one simulated host, which a fault can partition:
// `reset` (connections reset, new ones refused, as test/helpers/proxy.ts does) or `blackhole`
// (nothing is refused and nothing gets through: bytes and closes are held, as a dropped route
// holds TCP segments, and delivered late when the route heals).
import net from 'node:net';

export async function startProxy(targetPort, targetHost = '127.0.0.1') {
  const pairs = new Set();
  /** 'open' | 'reset' | 'blackhole' */
  let state = 'open';

  const server = net.createServer((client) => {
    if (state === 'reset') {
      client.resetAndDestroy();
      return;
    }
    const upstream = net.connect(targetPort, targetHost);
    const pair = { client, upstream, held: [], closed: 0 };
    pairs.add(pair);
    // While black-holed, every byte and every close is queued in order and replayed on heal.
    const deliver = (action) => {
      if (state === 'blackhole') pair.held.push(action);
      else action();
    };
    client.on('data', (chunk) => deliver(() => upstream.write(chunk)));
    upstream.on('data', (chunk) => deliver(() => client.write(chunk)));
    for (const [from, to] of [[client, upstream], [upstream, client]]) {
      from.on('error', () => {}); // 'close' follows
      from.on('end', () => deliver(() => to.end()));
      from.on('close', () => {
        deliver(() => to.end());
        pair.closed += 1;
        if (pair.closed === 2 && pair.held.length === 0) pairs.delete(pair);
      });
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();

  return {
    port,
    get state() {
      return state;
    },
    /** Partition this host from the database. */
    cut(mode = 'reset') {
      state = mode;
      if (mode === 'reset') {
        for (const p of pairs) {
          p.client.resetAndDestroy();
          p.upstream.destroy();
        }
        pairs.clear();
      }
    },
    heal() {
      state = 'open';
      for (const p of [...pairs]) {
        const held = p.held.splice(0);
        for (const replay of held) {
          try {
            replay();
          } catch {
            // the other side is already gone: what was in flight is lost, as on a real network
          }
        }
        if (p.closed === 2) pairs.delete(p);
      }
    },
    close: () =>
      new Promise((resolve) => {
        for (const p of pairs) {
          p.client.destroy();
          p.upstream.destroy();
        }
        pairs.clear();
        server.close(() => resolve());
      }),
    /** `url` with its host and port replaced by this proxy's. */
    url(url) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
  };
}
