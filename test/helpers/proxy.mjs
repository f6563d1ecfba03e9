// A TCP proxy in front of PostgreSQL that a test can partition from it, for the integration
// tests, the chaos harness (one per simulated host) and the benchmarks:
// - cut('reset'): open connections reset, new ones refused (the database "goes away");
// - cut('blackhole'): nothing is refused and nothing gets through: bytes and closes are held, as
//   a dropped route holds TCP segments, and delivered late when the route heals;
// - hold(): new connections are accepted and left unanswered (nothing reaches the database)
//   until heal(); open ones go on as before;
// - heal(): forward again, delivering whatever was held;
// - silence(text): the next statement containing `text` goes nowhere, and its connection stays
//   silent for good (no answer, no close), as when a NAT or a firewall forgets one connection;
//   other connections, new ones included, go on;
// - slowAnswers(text, ms): from the next statement containing `text`, for `ms`, such statements
//   reach the database at once, but what it answers on their connections is delivered only when
//   the `ms` are over, as from a database too busy to answer in time (their work is done, their
//   answers late);
// - retarget(url): open connections reset and new ones go to another server, as a virtual IP,
//   a Patroni HAProxy or a CloudNativePG -rw service moves to a promoted standby.
import net from 'node:net';

/**
 * @param {string} target the database's URL, to take host and port from
 */
export async function startProxy(target) {
  const dest = new URL(target);
  let [targetPort, targetHost] = [Number(dest.port), dest.hostname];
  const pairs = new Set();
  const heldClients = [];
  /** Armed by silence(): the text to look for and what resolves once it was seen. */
  const silencers = [];
  /** Armed by slowAnswers(): the text to look for, for how long, and (from its first sighting) until when to hold answers. */
  let slow = { text: '', ms: 0, until: undefined };
  /** 'open' | 'reset' | 'blackhole' | 'hold' */
  let state = 'open';
  /** Every connection accepted, in order: when it opened and (once it did) closed, ms since the epoch. */
  const accepted = [];

  const forward = (client) => {
    const upstream = net.connect(targetPort, targetHost);
    const pair = { client, upstream, held: [], closed: 0, silent: false, answersAt: 0, late: [], lateTimer: undefined };
    pairs.add(pair);
    // While black-holed, every byte and every close is queued in order and replayed on heal.
    const deliver = (action) => {
      if (pair.silent) return;
      if (state === 'blackhole') pair.held.push(action);
      else action();
    };
    client.on('data', (chunk) => {
      const i = silencers.findIndex((s) => chunk.includes(s.text));
      if (i >= 0 && !pair.silent) {
        pair.silent = true;
        silencers.splice(i, 1)[0].seen();
      }
      if (slow.text && chunk.includes(slow.text)) {
        slow.until ??= Date.now() + slow.ms;
        if (Date.now() < slow.until) pair.answersAt = slow.until;
      }
      deliver(() => upstream.write(chunk));
    });
    const flushLate = () => {
      pair.lateTimer = undefined;
      for (const late of pair.late.splice(0)) deliver(() => client.write(late));
    };
    upstream.on('data', (chunk) => {
      const wait = pair.answersAt - Date.now();
      if (wait <= 0 && pair.late.length === 0) {
        deliver(() => client.write(chunk));
        return;
      }
      pair.late.push(chunk);
      pair.lateTimer ??= setTimeout(flushLate, Math.max(0, wait));
    });
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ]) {
      from.on('error', () => {}); // 'close' follows
      from.on('end', () => deliver(() => to.end()));
      from.on('close', () => {
        deliver(() => to.end());
        pair.closed += 1;
        if (pair.closed === 2 && pair.held.length === 0) pairs.delete(pair);
      });
    }
    client.resume();
  };

  // Paused until forwarded: what a held client sends waits in its socket.
  const server = net.createServer({ pauseOnConnect: true }, (client) => {
    const seen = { openedAt: Date.now(), closedAt: undefined };
    accepted.push(seen);
    client.on('close', () => {
      seen.closedAt = Date.now();
    });
    if (state === 'reset') {
      client.resetAndDestroy();
      return;
    }
    if (state === 'hold') {
      client.on('error', () => {});
      heldClients.push(client);
      return;
    }
    forward(client);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();

  return {
    port,
    get state() {
      return state;
    },
    /** A copy of the connections accepted so far: counts and overlaps tell what a client did, whatever the machine's load. */
    connections() {
      return accepted.map((c) => ({ ...c }));
    },
    /** Partition the route to the database: 'reset' (the default) or 'blackhole'. */
    cut(mode = 'reset') {
      state = mode;
      if (mode === 'reset') {
        for (const p of pairs) {
          p.client.resetAndDestroy();
          p.upstream.destroy();
        }
        pairs.clear();
        for (const c of heldClients.splice(0)) c.resetAndDestroy();
      }
    },
    /**
     * The next statement whose text contains `text` never reaches the database and its
     * connection goes silent for good; resolves when that statement was sent.
     */
    silence(text) {
      return new Promise((resolve) => silencers.push({ text, seen: resolve }));
    },
    /**
     * From the next statement containing `text`, for `ms`, answers to such statements are held
     * until the `ms` are over (the statements themselves reach the database at once).
     */
    slowAnswers(text, ms) {
      slow = { text, ms, until: undefined };
    },
    /** Open connections reset; new ones go to `url`'s host and port (the address moved). */
    retarget(url) {
      const next = new URL(url);
      [targetPort, targetHost] = [Number(next.port), next.hostname];
      for (const p of pairs) {
        p.client.resetAndDestroy();
        p.upstream.destroy();
      }
      pairs.clear();
    },
    /** Leave new connections unanswered until heal(). */
    hold() {
      state = 'hold';
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
      for (const c of heldClients.splice(0)) if (!c.destroyed) forward(c);
    },
    close: () =>
      new Promise((resolve) => {
        silencers.length = 0;
        for (const p of pairs) {
          clearTimeout(p.lateTimer);
          p.client.destroy();
          p.upstream.destroy();
        }
        pairs.clear();
        for (const c of heldClients.splice(0)) c.destroy();
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
