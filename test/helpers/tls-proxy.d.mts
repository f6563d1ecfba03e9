export interface TlsProxy {
  port: number;
  /** TLS handshakes completed so far. */
  handshakes: () => number;
  close: () => Promise<void>;
}
export function startTlsProxy(opts: { host: string; port: number; cert: string; key: string }): Promise<TlsProxy>;
