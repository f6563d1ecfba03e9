// A trace per occurrence (issue 23): the trace id derived from the job and the window, the same on
// every runner; each attempt a span, exported over OTLP/HTTP (a real receiver decoding the JSON
// the SDK sends) when the standard OTEL_* variables ask for it; the child given TRACEPARENT; a
// collector that never answers costs a bounded wait and a warning, never the run's exit code; a
// run without the variables loads no OpenTelemetry module.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, logLines, runCli, startCli, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { startReceiver, type Receiver } from '../helpers/http-receiver.js';
import { tempDirPerTest } from '../helpers/temp.js';
import { attemptSpanId, occurrenceTraceId, rootSpanId } from '../../src/trace-context.js';

const newTmp = tempDirPerTest('leasejob-trace-');
let db: TestDb;
let collector: Receiver;
beforeAll(async () => {
  db = await testDb();
  collector = await startReceiver();
});
afterAll(async () => {
  await collector.close();
  await db.close();
});

/** The variables of the OpenTelemetry SDK, none set unless a test sets them. */
const NO_OTEL = {
  OTEL_EXPORTER_OTLP_ENDPOINT: undefined,
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: undefined,
  OTEL_EXPORTER_OTLP_PROTOCOL: undefined,
  OTEL_TRACES_EXPORTER: undefined,
  OTEL_SDK_DISABLED: undefined,
  OTEL_SERVICE_NAME: undefined,
  TRACEPARENT: undefined,
  TRACESTATE: undefined,
};
const otel = (endpoint: string): Record<string, string | undefined> => ({
  ...NO_OTEL,
  OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
  OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
  OTEL_SERVICE_NAME: 'nightly-runner',
});

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes: Array<{ key: string; value: Record<string, unknown> }>;
  status?: { code?: number };
}
interface OtlpBody {
  resourceSpans: Array<{
    resource: { attributes: Array<{ key: string; value: Record<string, unknown> }> };
    scopeSpans: Array<{ spans: OtlpSpan[] }>;
  }>;
}

const attr = (s: { attributes: OtlpSpan['attributes'] }, key: string): unknown => {
  const v = s.attributes.find((a) => a.key === key)?.value;
  // OTLP/JSON gives integers as numbers or strings: compared as strings here.
  return v === undefined ? undefined : String(v.stringValue ?? v.intValue ?? v.boolValue ?? v.doubleValue);
};
/** Every span the collector received for `job` (a resource attribute), with its resource's service and host names. */
function received(job: string): Array<OtlpSpan & { service: unknown; host: unknown }> {
  return collector.requests
    .filter((r) => r.path === '/v1/traces')
    .flatMap((r) => (JSON.parse(r.text ?? '{}') as OtlpBody).resourceSpans)
    .filter((rs) => attr({ attributes: rs.resource.attributes }, 'leasejob.job') === job)
    .flatMap((rs) =>
      rs.scopeSpans.flatMap((ss) =>
        ss.spans.map((s) => ({
          ...s,
          service: attr({ attributes: rs.resource.attributes }, 'service.name'),
          host: attr({ attributes: rs.resource.attributes }, 'host.name'),
        })),
      ),
    );
}
const lines = (file: string): Array<Record<string, string | null>> =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, string | null>);

const conn = (): string[] => ['--database-url', db.url, '--schema', db.schema];

describe('a trace per occurrence', () => {
  it('a failed attempt on one runner and its retry on another: one trace, two attempt spans, TRACEPARENT in each child', async () => {
    const file = path.join(newTmp(), 'trace');
    const job = 'traced';
    const args = (code: number): string[] => [
      'run',
      ...conn(),
      '--name',
      job,
      '--window',
      'w1',
      '--max-attempts',
      '2',
      '--',
      process.execPath,
      fixture('append-trace.mjs'),
      file,
      String(code),
    ];
    const first = await runCli(args(3), { ...otel(collector.url), TRACESTATE: 'vendor=abc' });
    expect(first.exitCode, first.all).toBe(3);
    const second = await runCli(args(0), otel(collector.url));
    expect(second.exitCode, second.all).toBe(0);

    const traceId = occurrenceTraceId(job, 'w1');
    const children = lines(file);
    expect(children.map((c) => c.LEASEJOB_ATTEMPT)).toEqual(['1', '2']);
    const attempts = received(job).filter((s) => s.name === 'attempt');
    expect(attempts.map((s) => attr(s, 'leasejob.attempt')).sort()).toEqual(['1', '2']);
    for (const [i, child] of children.entries()) {
      const span = attempts.find((s) => String(attr(s, 'leasejob.attempt')) === child.LEASEJOB_ATTEMPT)!;
      // Each child continues its own attempt's span of the occurrence's one trace.
      expect(child.TRACEPARENT).toBe(`00-${traceId}-${span.spanId}-01`);
      expect(span.spanId).toBe(attemptSpanId(job, 'w1', child.FENCE_TOKEN!, i + 1));
      expect(span.traceId).toBe(traceId);
      // Under the occurrence's root, which the second run sent: it ended the occurrence.
      expect(span.parentSpanId).toBe(rootSpanId(job, 'w1', ''));
    }
    // A TRACESTATE leasejob was given is passed on; none is made up.
    expect(children.map((c) => c.TRACESTATE)).toEqual(['vendor=abc', null]);
    const byAttempt = (n: string) => attempts.find((s) => String(attr(s, 'leasejob.attempt')) === n)!;
    expect([attr(byAttempt('1'), 'leasejob.outcome'), attr(byAttempt('1'), 'leasejob.exit_code')]).toEqual([
      'failed',
      '3',
    ]);
    expect(byAttempt('1').status?.code).toBe(2); // ERROR
    expect([attr(byAttempt('2'), 'leasejob.outcome'), attr(byAttempt('2'), 'leasejob.exit_code')]).toEqual([
      'completed',
      '0',
    ]);
    for (const s of attempts) {
      expect(s.host).toEqual(expect.any(String));
      expect(attr(s, 'leasejob.fence_token')).toEqual(expect.any(String));
      expect(s.service).toBe('nightly-runner');
    }
    // Acquire, child and finish of both attempts, all in the occurrence's trace; child and finish under their attempt.
    const all = received(job);
    expect(new Set(all.map((s) => s.traceId))).toEqual(new Set([traceId]));
    expect(all.filter((s) => s.name === 'acquire')).toHaveLength(2);
    expect(all.filter((s) => (s.parentSpanId ?? '') === '').map((s) => [s.name, s.spanId])).toEqual([
      ['occurrence', rootSpanId(job, 'w1', '')],
    ]);
    for (const name of ['child', 'finish'])
      expect(
        all
          .filter((s) => s.name === name)
          .map((s) => s.parentSpanId)
          .sort(),
      ).toEqual(attempts.map((s) => s.spanId).sort());
    expect(
      attr(
        all.find((s) => s.name === 'child' && s.parentSpanId === byAttempt('1').spanId)!,
        'process.exit.code',
      ),
    ).toBe('3');
  });

  it('a backfill of an occurrence and a later rerun of it land in the same trace', async () => {
    const file = path.join(newTmp(), 'trace');
    const job = 'traced-backfill';
    const child = ['--', process.execPath, fixture('append-trace.mjs'), file];
    const schedule = ['--schedule', '0 * * * *'];
    const bf = await runCli(
      [
        'backfill',
        ...conn(),
        '--name',
        job,
        ...schedule,
        '--from',
        '2026-01-01T00:00:00Z',
        '--to',
        '2026-01-01T02:00:00Z',
        ...child,
      ],
      NO_OTEL,
    );
    expect(bf.exitCode, bf.all).toBe(0);
    const rerun = await runCli(
      [
        'run',
        ...conn(),
        '--name',
        job,
        ...schedule,
        '--window-from-schedule',
        '--scheduled-time',
        '2026-01-01T01:00:00Z',
        '--rerun',
        ...child,
      ],
      NO_OTEL,
    );
    expect(rerun.exitCode, rerun.all).toBe(0);
    const seen = lines(file);
    expect(seen.length).toBeGreaterThanOrEqual(3);
    for (const c of seen)
      expect(c.TRACEPARENT!.split('-')[1], c.LEASEJOB_WINDOW!).toBe(occurrenceTraceId(job, c.LEASEJOB_WINDOW!));
    const again = seen.at(-1)!;
    const first = seen.find((c) => c.LEASEJOB_WINDOW === again.LEASEJOB_WINDOW)!;
    expect(first).not.toBe(again);
    expect(again.TRACEPARENT!.split('-')[1]).toBe(first.TRACEPARENT!.split('-')[1]);
    expect(again.TRACEPARENT!.split('-')[2]).not.toBe(first.TRACEPARENT!.split('-')[2]);
  });

  it('retries inside one run (--retries) are attempt spans of the same trace, each with its child', async () => {
    const job = 'traced-retries';
    const r = await runCli(
      [
        'run',
        ...conn(),
        '--name',
        job,
        '--window',
        'w1',
        '--retries',
        '1',
        '--retry-delay',
        '10ms',
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        '3',
      ],
      otel(collector.url),
    );
    expect(r.exitCode, r.all).toBe(3);
    const spans = received(job);
    const attempts = spans.filter((s) => s.name === 'attempt');
    expect(attempts.map((s) => [attr(s, 'leasejob.attempt'), attr(s, 'leasejob.outcome')]).sort()).toEqual([
      ['1', 'failed'],
      ['2', 'failed'],
    ]);
    expect(new Set(spans.map((s) => s.traceId))).toEqual(new Set([occurrenceTraceId(job, 'w1')]));
    expect(
      spans
        .filter((s) => s.name === 'child')
        .map((s) => s.parentSpanId)
        .sort(),
    ).toEqual(attempts.map((s) => s.spanId).sort());
  });

  it('a lost lease: the attempt span says lost, with its exit code 75 and an event', async () => {
    const job = 'traced-lost';
    const holder = startCli(
      [
        'run',
        ...conn(),
        '--name',
        job,
        '--window',
        'w1',
        '--ttl',
        '15s',
        '--',
        process.execPath,
        fixture('wait-for-file.mjs'),
        path.join(newTmp(), 'never'),
        '60000',
      ],
      otel(collector.url),
    );
    await waitFor(
      'the holder to take the lease',
      async () =>
        (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = $1 AND expires_at > now()`, [job])).length > 0,
    );
    const released = await runCli(['release', ...conn(), '--name', job, '--force']);
    expect(released.exitCode, released.all).toBe(0);
    expect((await holder).exitCode).toBe(75);
    const attempt = received(job).find((s) => s.name === 'attempt')!;
    expect([attr(attempt, 'leasejob.outcome'), attr(attempt, 'leasejob.exit_code')]).toEqual(['lost', '75']);
    expect((attempt as OtlpSpan & { events?: Array<{ name: string }> }).events?.map((e) => e.name)).toContain(
      'lease lost',
    );
  });

  it('a run that finds the occurrence done exports its skip in the same trace', async () => {
    const job = 'traced-skip';
    const run = (): Promise<{ exitCode?: number; all?: string }> =>
      runCli(['run', ...conn(), '--name', job, '--window', 'w1', '--', 'true'], otel(collector.url));
    expect((await run()).exitCode).toBe(0);
    expect((await run()).exitCode).toBe(0);
    const skips = received(job).filter((s) => s.name === 'skip');
    expect(skips.map((s) => [s.traceId, attr(s, 'leasejob.skip_reason')])).toEqual([
      [occurrenceTraceId(job, 'w1'), 'done'],
    ]);
  });

  it('without OTEL_EXPORTER_OTLP_PROTOCOL the spans go as protobuf, the protocol the specification makes the default', async () => {
    const before = collector.requests.length;
    const r = await runCli(['run', ...conn(), '--name', 'traced-proto', '--window', 'w1', '--', 'true'], {
      ...otel(collector.url),
      OTEL_EXPORTER_OTLP_PROTOCOL: undefined,
    });
    expect(r.exitCode, r.all).toBe(0);
    const sent = collector.requests.slice(before).filter((q) => q.path === '/v1/traces');
    expect(sent.map((q) => q.headers['content-type'])).toEqual(['application/x-protobuf']);
    // The trace id's bytes are in the message as they are.
    expect(sent[0]!.body.includes(Buffer.from(occurrenceTraceId('traced-proto', 'w1'), 'hex'))).toBe(true);
  });

  it('a collector that never answers: the run keeps its exit code and says the export failed', async () => {
    const silent = await startReceiver({ silent: true });
    try {
      const file = path.join(newTmp(), 'trace');
      const r = await runCli(
        [
          'run',
          ...conn(),
          '--name',
          'traced-dead',
          '--window',
          'w1',
          '--',
          process.execPath,
          fixture('append-trace.mjs'),
          file,
          '5',
        ],
        otel(silent.url),
      );
      expect(r.exitCode, r.all).toBe(5);
      expect(lines(file)[0]!.TRACEPARENT).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
      expect(logLines(r.stderr).find((l) => l.msg === 'trace export failed; the run is unaffected')?.err).toBe(
        'timed out',
      );
    } finally {
      await silent.close();
    }
  });

  it('without the OTEL_* variables the child still gets TRACEPARENT, and no OpenTelemetry module is loaded', async () => {
    const tmp = newTmp();
    const file = path.join(tmp, 'trace');
    const run = (env: Record<string, string | undefined>, window: string, files: string) =>
      runCli(
        [
          'run',
          ...conn(),
          '--name',
          'traced-off',
          '--window',
          window,
          '--',
          process.execPath,
          fixture('append-trace.mjs'),
          file,
        ],
        {
          ...env,
          NODE_OPTIONS: `--require=${JSON.stringify(fixture('module-list.cjs'))}`,
          LEASEJOB_TEST_MODULE_FILES: files,
        },
      );
    const off = path.join(tmp, 'off');
    const r = await run(NO_OTEL, 'w1', off);
    expect(r.exitCode, r.all).toBe(0);
    expect(lines(file)[0]!.TRACEPARENT).toMatch(new RegExp(`^00-${occurrenceTraceId('traced-off', 'w1')}-`));
    const otelFiles = (f: string) =>
      readFileSync(f, 'utf8')
        .split('\n')
        .filter((m) => m.includes(`${path.sep}@opentelemetry${path.sep}`));
    expect(otelFiles(off)).toEqual([]);
    // The listing is real: with the variables, the SDK is loaded.
    const on = path.join(tmp, 'on');
    expect((await run(otel(collector.url), 'w2', on)).exitCode).toBe(0);
    expect(otelFiles(on).some((m) => m.includes(`sdk-trace${path.sep}`))).toBe(true);
    // OTEL_SDK_DISABLED=true, as the SDK reads it: nothing loaded either.
    const disabled = path.join(tmp, 'disabled');
    expect((await run({ ...otel(collector.url), OTEL_SDK_DISABLED: 'true' }, 'w3', disabled)).exitCode).toBe(0);
    expect(otelFiles(disabled)).toEqual([]);
  });
});
