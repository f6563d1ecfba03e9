// A scrape flood (issue 44, item 4): 2,000 concurrent `GET /metrics` over real HTTP against the
// real exporter, on both stores, share reads of the store instead of queueing one read each. The
// exporter's debug log says how many requests each read served; no duration is asserted (the
// speed is in docs/performance.md, measured by `node test/bench/scrape-flood.mjs`).
import http from 'node:http';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, startExporter } from '../helpers/cli.js';
import { bothStores, NO_DB_ENV } from '../helpers/both-stores.js';
import { signalPid } from '../helpers/signal.mjs';

const { stores } = bothStores('leasejob-scrape-flood-');
const REQUESTS = 2_000;

/** A TCP connection to the exporter, established (the kernel's handshake done). */
function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: '127.0.0.1', port }, () => resolve(sock));
    sock.once('error', reject);
  });
}

/** One GET on an established connection of its own; `sent` resolves once its bytes are in the kernel. */
function get(
  sock: net.Socket,
  path: string,
): { sent: Promise<void>; answer: Promise<{ status: number; body: string }> } {
  let sent!: () => void;
  const sentP = new Promise<void>((r) => (sent = r));
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request({ path, createConnection: () => sock, timeout: 300_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('finish', sent);
    req.on('timeout', () => req.destroy(new Error('no answer in 300 s')));
    req.on('error', reject);
    req.end();
  });
  return { sent: sentP, answer };
}

/**
 * The flood, as 2,000 scrapers firing at once: the exporter stopped (SIGSTOP) while every
 * connection is made (the kernel completes them into its listen backlog, 4,096) and every request
 * sent, and let go (SIGCONT) once all are there. Sent to a running exporter, they would reach it
 * as fast as this process can open and write them, and the test would measure that; this way
 * every request is there before the exporter takes up any.
 */
async function flood(port: number, pid: number, n: number): Promise<Array<{ status: number; body: string }>> {
  expect(signalPid(pid, 'SIGSTOP')).toBe(true);
  let requests: Array<ReturnType<typeof get>>;
  try {
    const socks = await Promise.all(Array.from({ length: n }, () => connect(port)));
    requests = socks.map((s) => get(s, '/metrics'));
    await Promise.all(requests.map((r) => r.sent));
  } finally {
    signalPid(pid, 'SIGCONT');
  }
  return await Promise.all(requests.map((r) => r.answer));
}

describe.each(stores)('a scrape flood in %s', (store, conn) => {
  const tag = store === 'PostgreSQL' ? 'pg' : 'lite';

  it(`${REQUESTS} concurrent /metrics requests are all answered, by reads each shared by many of them`, async () => {
    for (const job of [`flood-a-${tag}`, `flood-b-${tag}`]) {
      const r = await runCli(
        ['run', ...conn(), '--name', job, '--window', 'w1', '--', process.execPath, fixture('exit-with.mjs'), '0'],
        NO_DB_ENV,
      );
      expect(r.exitCode, r.all).toBe(0);
    }
    const ex = await startExporter([...conn(), '--log-level', 'debug'], NO_DB_ENV, { timeoutMs: 600_000 });
    let answers: Array<{ status: number; body: string }>;
    try {
      answers = await flood(ex.port, ex.p.pid!, REQUESTS);
    } finally {
      await ex.stop();
    }
    // Every request answered with the whole state read from the store.
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(a.body).toMatch(/^leasejob_up 1$/m);
      expect(a.body).toContain(`leasejob_lease_held{job="flood-a-${tag}"} 0`);
      expect(a.body).toContain(`leasejob_lease_held{job="flood-b-${tag}"} 0`);
    }
    // Each read of the store said how many requests it answered: all of them, in far fewer reads.
    const reads = logLines((await ex.p).stderr as string).filter((l) => l.msg === 'scrape read shared');
    const served = reads.map((l) => Number(l.served));
    console.log(`scrape flood, ${store}: ${reads.length} reads served ${REQUESTS} requests (${served.join(' ')})`);
    expect(served.reduce((n, s) => n + s, 0)).toBe(REQUESTS);
    // All there before the exporter took up any: one read answers them (the loop takes up a few
    // connections a turn; a read goes on answering while every turn brings more, up to 1 s), a
    // few when a turn brought none. Read one by one (main before issue 44): 2,000 reads.
    expect(Math.max(...served), served.join(' ')).toBeGreaterThanOrEqual(100);
    expect(reads.length, `${reads.length} reads served ${REQUESTS} requests: ${served.join(' ')}`).toBeLessThanOrEqual(
      REQUESTS / 40,
    );
    // A read's requests get the same bytes: as many distinct bodies as reads at most.
    expect(
      new Set(answers.map((a) => a.body.replace(/^leasejob_scrape_duration_seconds .*$/m, ''))).size,
    ).toBeLessThanOrEqual(reads.length);
  }, 600_000);
});
