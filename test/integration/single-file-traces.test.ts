// Issue 27: the single executable (what the crontab docs, the image and the chart run) exports its
// spans as the npm build does, to a real OTLP/HTTP receiver, in both encodings: one tree per
// occurrence, whose root (its id derived from the job and the window) is sent once, by the run
// that ends the occurrence, here on a second host after a first host's failed attempt and its
// retry; the resource names the service, the node name leasejob records and the job; a collector
// that refuses the connection is not waited for. Skipped, saying why, only when the file cannot
// be built.
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { logLines } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { startReceiver, type Receiver } from '../helpers/http-receiver.js';
import { receivedSpans, type ReceivedSpan } from '../helpers/otlp.js';
import { singleFile } from '../helpers/single-file.js';
import { tempDirs } from '../helpers/temp.js';
import { attemptSpanId, occurrenceTraceId, rootSpanId } from '../../src/trace-context.js';

const built = singleFile();
if (built.unbuilt) console.info(`single-file trace tests skipped: ${built.unbuilt}`);

const dirs = tempDirs('leasejob-sf-traces-');
let db: TestDb;
let collector: Receiver;
beforeAll(async () => {
  db = await testDb();
  collector = await startReceiver({ binary: true });
});
afterAll(async () => {
  await collector?.close();
  await db?.close();
});

/** The file run as cron runs it: a bare environment, its node name and the OTEL_* variables given. */
function runFile(args: string[], env: Record<string, string>, timeoutMs = 120_000) {
  const cwd = dirs();
  return execa(built.file!, args, {
    cwd,
    env: { PATH: '/usr/bin:/bin', HOME: cwd, ...env },
    extendEnv: false,
    reject: false,
    all: true,
    timeout: timeoutMs,
  });
}

const SCHEDULED = '2026-01-01T01:00:00Z';

describe.skipIf(built.unbuilt !== undefined)('the single executable exports its spans', () => {
  for (const protocol of ['http/json', 'http/protobuf'] as const) {
    it(`over ${protocol}: one tree per occurrence across two hosts and a retry, the root sent once by the run that ends it`, async () => {
      const job = `sf-traced-${protocol.slice(5)}`;
      const before = collector.requests.length;
      const run = (node: string, child: string[]) =>
        runFile(
          [
            'run',
            '--database-url',
            db.url,
            '--schema',
            db.schema,
            '--name',
            job,
            '--schedule',
            '0 * * * *',
            '--window-from-schedule',
            '--scheduled-time',
            SCHEDULED,
            '--max-attempts',
            '3',
            '--retries',
            '1',
            '--retry-delay',
            '10ms',
            '--',
            ...child,
          ],
          {
            LEASEJOB_NODE_NAME: node,
            OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
            OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
            // The crontab's level: a run whose export worked says nothing at warn.
            LEASEJOB_LOG_LEVEL: 'warn',
          },
        );
      // Host a: attempt 1 fails, its retry (attempt 2) fails too; one attempt is left.
      const a = await run('node-a', ['sh', '-c', 'exit 3']);
      expect(a.exitCode, a.all).toBe(3);
      // Host b: attempt 3 completes the occurrence, and sends its root.
      const b = await run('node-b', ['true']);
      expect(b.exitCode, b.all).toBe(0);
      // Nothing at warn: no "does not export", no failed export.
      expect(logLines(b.stderr).filter((l) => l.level === 'warn' || l.level === 40)).toEqual([]);
      expect(
        logLines(a.stderr).filter((l) => String(l.msg).includes('export') || String(l.msg).includes('trace')),
      ).toEqual([]);

      const requests = collector.requests.slice(before).filter((r) => r.path === '/v1/traces');
      expect(requests.map((r) => r.headers['content-type'])).toEqual(
        Array(2).fill(protocol === 'http/json' ? 'application/json' : 'application/x-protobuf'),
      );
      const spans = receivedSpans(requests);
      const attempts = spans.filter((s) => s.name === 'attempt');
      const window = attempts[0]!.attributes['leasejob.window']!;
      const traceId = occurrenceTraceId(job, window);
      expect(new Set(spans.map((s) => s.traceId))).toEqual(new Set([traceId]));

      // One root, the derived one, sent by host b, from the scheduled time to the end.
      const roots = spans.filter((s) => s.parentSpanId === '');
      expect(roots.map((s) => [s.name, s.spanId, s.resource['host.name']])).toEqual([
        ['occurrence', rootSpanId(job, window, ''), 'node-b'],
      ]);
      const root = roots[0]!;
      expect(root.startMs).toBe(Date.parse(SCHEDULED));
      expect(root.endMs).toBeGreaterThanOrEqual(Math.max(...spans.map((s) => s.endMs)));
      expect([root.attributes['leasejob.outcome'], root.attributes['leasejob.attempts']]).toEqual(['completed', '3']);

      // Every attempt (both hosts, the retry included) and every acquire hang under it; child and finish under their attempt.
      expect(
        attempts.map((s) => [s.attributes['leasejob.attempt'], s.resource['host.name'], s.parentSpanId]).sort(),
      ).toEqual([
        ['1', 'node-a', root.spanId],
        ['2', 'node-a', root.spanId],
        ['3', 'node-b', root.spanId],
      ]);
      for (const s of attempts)
        expect(s.spanId).toBe(
          attemptSpanId(job, window, s.attributes['leasejob.fence_token']!, Number(s.attributes['leasejob.attempt'])),
        );
      expect(spans.filter((s) => s.name === 'acquire').map((s) => s.parentSpanId)).toEqual([root.spanId, root.spanId]);
      for (const name of ['child', 'finish'])
        expect(
          spans
            .filter((s) => s.name === name)
            .map((s) => s.parentSpanId)
            .sort(),
        ).toEqual(attempts.map((s) => s.spanId).sort());
      // One tree: every span's parent was received.
      const ids = new Set(spans.map((s) => s.spanId));
      expect(spans.filter((s) => s.parentSpanId !== '' && !ids.has(s.parentSpanId))).toEqual([]);

      // The resource, as the OpenTelemetry conventions name it; not repeated on each span.
      for (const s of spans) {
        expect(s.resource).toMatchObject({ 'service.name': 'leasejob', 'leasejob.job': job });
        expect(s.resource['service.version']).toMatch(/^\d+\.\d+\.\d+/);
        expect(s.attributes['host.name']).toBeUndefined();
      }
      expect(new Set(spans.map((s: ReceivedSpan) => s.resource['host.name']))).toEqual(new Set(['node-a', 'node-b']));
      expect(attempts.filter((s) => s.attributes['leasejob.attempt'] !== '3').map((s) => s.statusCode)).toEqual([2, 2]);
    });
  }

  it('a collector that refuses the connection is not waited for: the run ends at once, saying so', async () => {
    // A port nobody listens on: bound, then closed.
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const r = await runFile(
      ['run', '--database-url', db.url, '--schema', db.schema, '--name', 'sf-refused', '--window', 'w1', '--', 'true'],
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        // The export's bound set to ten minutes: a run that waited it out would outlive the
        // test's deadline below.
        OTEL_EXPORTER_OTLP_TIMEOUT: '600000',
      },
      60_000,
    );
    expect(r.timedOut, 'the run waited on a refused collector').toBe(false);
    expect(r.exitCode, r.all).toBe(0);
    const warned = logLines(r.stderr).find((l) => l.msg === 'trace export failed; the run is unaffected');
    // Given up at the refusal itself, not after the SDK's retries of it (whose last error would be
    // the same ECONNREFUSED, after about 13 s of backoff).
    expect(String(warned?.err)).toMatch(/^no collector there \(ECONNREFUSED: /);
  });
});
