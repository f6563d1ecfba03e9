// A PostgreSQL TLS endpoint for tests: answers the client's SSLRequest with 'S', completes the
// TLS handshake with the given certificate, then relays the decrypted protocol to a plain
// server. A client that does not ask for TLS is refused, so a query through it proves TLS.
import net from 'node:net';
import tls from 'node:tls';

const SSL_REQUEST_CODE = 80877103;

/**
 * @param {{ host: string; port: number; cert: string; key: string }} opts
 * @returns {Promise<{ port: number; handshakes: () => number; close: () => Promise<void> }>}
 */
export async function startTlsProxy(opts) {
  let handshakes = 0;
  const sockets = new Set();
  const server = net.createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => client.destroy());
    client.once('data', (first) => {
      client.pause();
      if (first.length !== 8 || first.readInt32BE(4) !== SSL_REQUEST_CODE) {
        client.destroy();
        return;
      }
      client.write('S');
      const secure = new tls.TLSSocket(client, { isServer: true, cert: opts.cert, key: opts.key });
      secure.on('error', () => client.destroy());
      secure.once('secure', () => {
        handshakes += 1;
        const upstream = net.connect(opts.port, opts.host);
        sockets.add(upstream);
        upstream.on('close', () => {
          sockets.delete(upstream);
          secure.destroy();
        });
        upstream.on('error', () => secure.destroy());
        secure.on('close', () => upstream.destroy());
        secure.pipe(upstream).pipe(secure);
      });
      client.resume();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  return {
    port: /** @type {net.AddressInfo} */ (server.address()).port,
    handshakes: () => handshakes,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve(undefined));
      }),
  };
}
