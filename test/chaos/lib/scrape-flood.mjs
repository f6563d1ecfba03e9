// The scrape-flood actor beside the runs (issue 44): one real `leasejob exporter` on the chaos
// database for the round, and every 1-4 s a flood of concurrent `GET /metrics` (every connection
// opened first, then every request sent at once) with one more scrape on a connection of its own,
// as Prometheus's would be, while the runs, the operators and the faults go on. The invariant
// (judgeScrapeFlood): every request is answered with a whole exposition, and the answers of one
// flood agree (they share reads of the store).
import { spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import { BIN } from './cluster.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** Per flood: enough to queue reads for seconds before coalescing, not so many as to starve the runs of the 2 cores. */
const FLOOD = 300;
/** A request not answered by then is a violation: Prometheus's default scrape timeout is 10 s; this leaves room for a busy machine. */
const ANSWER_MS = 60_000;

export class ScrapeFlood {
  /** @param {{ url: string, schema: string, rng: object, round: number }} o */
  constructor({ url, schema, rng, round }) {
    this.url = url;
    this.schema = schema;
    this.rng = rng;
    this.round = round;
    this.actions = [];
    this.children = new Set();
  }

  startExporter() {
    return new Promise((resolve, reject) => {
      const env = Object.fromEntries(
        Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|LEASEJOB_|PG[A-Z]+$)/.test(k)),
      );
      const args = [
        'exporter',
        '--database-url',
        this.url,
        '--schema',
        this.schema,
        '--port',
        '0',
        '--host',
        '127.0.0.1',
      ];
      const p = spawn(process.execPath, [BIN, ...args], { env, stdio: ['ignore', 'ignore', 'pipe'] });
      this.children.add(p);
      let err = '';
      p.stderr.on('data', (d) => {
        err = (err + d).slice(-20_000);
        const line = err.split('\n').find((l) => l.includes('"exporter listening"'));
        if (line && this.port === undefined) {
          this.port = JSON.parse(line).port;
          resolve();
        }
      });
      p.on('exit', (code) => {
        this.children.delete(p);
        if (this.port === undefined) reject(new Error(`exporter exited ${code}: ${err.slice(-500)}`));
      });
    });
  }

  /** One flood: FLOOD requests sent at once and one more on its own connection; what each answered. */
  async flood() {
    const startedAt = Date.now();
    const socks = await Promise.all(Array.from({ length: FLOOD }, () => connect(this.port).catch((e) => e)));
    const answers = await Promise.all([...socks.map((s) => get(this.port, s)), get(this.port)]);
    const legit = answers.pop();
    return {
      kind: 'scrape-flood',
      startedAt,
      endedAt: Date.now(),
      answers: answers.map(summary),
      legit: summary(legit),
      code: 0,
    };
  }

  start() {
    this.stopped = false;
    this.loop = (async () => {
      try {
        await this.startExporter();
      } catch (err) {
        this.actions.push({
          kind: 'scrape-flood',
          startedAt: Date.now(),
          endedAt: Date.now(),
          startError: String(err),
        });
        return;
      }
      while (!this.stopped) {
        this.actions.push(await this.flood());
        await sleep(this.rng.int(1_000, 4_000));
      }
    })();
  }

  async stop() {
    this.stopped = true;
    await this.loop;
    for (const p of this.children) p.kill('SIGTERM');
  }

  kill() {
    for (const p of this.children) p.kill('SIGKILL');
  }

  judge() {
    return judgeScrapeFlood(this.actions);
  }
}

const connect = (port) =>
  new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port }, () => resolve(s));
    s.once('error', reject);
  });

/** GET /metrics on an established socket, or a new one: { status, body, ms } or { error, ms }. */
function get(port, sock) {
  const t0 = performance.now();
  if (sock instanceof Error) return Promise.resolve({ error: `connect: ${sock.message}`, ms: 0 });
  return new Promise((resolve) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path: '/metrics',
        timeout: ANSWER_MS,
        ...(sock ? { createConnection: () => sock } : { agent: false }),
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode, body, ms: performance.now() - t0 }));
        res.on('error', (e) => resolve({ error: e.message, ms: performance.now() - t0 }));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer in ${ANSWER_MS} ms`)));
    req.on('error', (e) => resolve({ error: e.message, ms: performance.now() - t0 }));
    req.end();
  });
}

/** What an answer said: its status, leasejob_up, leasejob_jobs and whether the exposition is whole. */
function summary(a) {
  if (a.error) return { error: a.error, ms: a.ms };
  const value = (name) => {
    const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(a.body);
    return m ? Number(m[1]) : undefined;
  };
  return {
    status: a.status,
    up: value('leasejob_up'),
    jobs: value('leasejob_jobs'),
    whole: a.body.endsWith('\n'),
    ms: a.ms,
  };
}

/**
 * scrapes-answer: every request of every flood, and the scrape beside it, is answered 200 with a
 * whole exposition that says leasejob_up (0 while a fault keeps the database away: the last state
 * read is then served); one that says up 1 has leasejob_jobs; and the exporter started.
 */
export function judgeScrapeFlood(actions) {
  const v = [];
  for (const a of actions) {
    if (a.startError) {
      v.push(`the exporter did not start: ${a.startError}`);
      continue;
    }
    const bad = [...a.answers, a.legit].filter(
      (x) =>
        x.error || x.status !== 200 || !x.whole || (x.up !== 0 && x.up !== 1) || (x.up === 1 && x.jobs === undefined),
    );
    if (bad.length > 0)
      v.push(
        `flood at ${new Date(a.startedAt).toISOString()}: ${bad.length} of ${a.answers.length + 1} answers bad, e.g. ${JSON.stringify(bad[0])}`,
      );
  }
  return { 'scrapes-answer': v };
}

/** The figures: floods, requests, and the scrape beside each flood (ms). */
export function floodFigures(actions) {
  const floods = actions.filter((a) => a.answers);
  return {
    floods: floods.length,
    requests: floods.reduce((n, a) => n + a.answers.length + 1, 0),
    legitMs: floods.map((a) => a.legit.ms),
  };
}
