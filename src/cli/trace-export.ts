// The recorded spans of a run (trace-spans.ts) sent over OTLP/HTTP with the OpenTelemetry JS SDK.
// Imported only when the OTEL_* variables ask for an export: a run without them loads none of it.
// The SDK reads the rest of the standard variables itself (endpoint, headers, timeout,
// compression, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES). It imports nothing of leasejob's
// but types: the single executable carries it as a bundle of its own, with the SDK
// (scripts/bundle.mjs), loaded apart from the CLI's.
import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import { ROOT_CONTEXT, SpanStatusCode, TraceFlags, trace } from '@opentelemetry/api';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace';

export type SpanValue = string | number | boolean;

/** One span as recorded: what trace-export.ts hands to the SDK. Times are epoch milliseconds. */
export interface SpanRecord {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string | undefined;
  startMs: number;
  endMs?: number | undefined;
  attributes: Record<string, SpanValue>;
  error?: string | undefined;
  events: Array<{ name: string; atMs: number; attributes: Record<string, SpanValue> }>;
  /** The trace leasejob itself was started in (its own TRACEPARENT), linked from each attempt. */
  links: Array<{ traceId: string; spanId: string }>;
}

export type TraceProtocol = 'http/protobuf' | 'http/json';

/**
 * Errors that say no collector is there: the SDK retries them with a backoff until its timeout,
 * which a run would wait out at its exit for nothing; leasejob gives up at the first.
 */
const UNREACHABLE = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH']);

/**
 * The SDK's agent for `protocol`, telling `onUnreachable` when a connection fails for want of a
 * collector. The SDK still handles the error as it does (its retry is left to time out unawaited).
 */
function watchedAgent(protocol: string, onUnreachable: (err: NodeJS.ErrnoException) => void): http.Agent {
  const agent = protocol === 'https:' ? new https.Agent() : new http.Agent();
  const proto = agent as unknown as { createConnection: (...args: unknown[]) => Socket };
  const create = proto.createConnection.bind(agent);
  proto.createConnection = (...args: unknown[]) => {
    const socket = create(...args);
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (UNREACHABLE.has(err.code ?? '')) onUnreachable(err);
    });
    return socket;
  };
  return agent;
}

/**
 * Sends `spans` in one request, under `resource` (merged with OTEL_SERVICE_NAME and
 * OTEL_RESOURCE_ATTRIBUTES, which win); resolves with undefined once the collector took them, or
 * with why not.
 */
export async function exportSpans(
  spans: SpanRecord[],
  protocol: TraceProtocol,
  resource: Record<string, string>,
): Promise<string | undefined> {
  let unreachable: (why: string) => void = () => {};
  const refused = new Promise<string>((resolve) => (unreachable = resolve));
  const httpAgentOptions = (p: string) =>
    watchedAgent(p, (err) => unreachable(`no collector there (${err.code}: ${err.message})`));
  // Static imports, both: the CLI bundle is loaded as a script, where import() of a package is not available.
  const exporter =
    protocol === 'http/json' ? new JsonExporter({ httpAgentOptions }) : new ProtobufExporter({ httpAgentOptions });
  const version = resource['service.version'];
  // The ids are leasejob's (derived for attempts: trace-context.ts), handed to the SDK as each span starts.
  const next = { traceId: '', spanId: '' };
  const ended: ReadableSpan[] = [];
  const provider = new TracerProvider({
    resource: resourceFromAttributes(resource).merge(detectResources({ detectors: [envDetector] })),
    idGenerator: { generateTraceId: () => next.traceId, generateSpanId: () => next.spanId },
    spanProcessors: [
      {
        onStart: () => {},
        onEnd: (s) => void ended.push(s),
        forceFlush: () => Promise.resolve(),
        shutdown: () => Promise.resolve(),
      },
    ],
  });
  const tracer = provider.getTracer('leasejob', version);
  for (const r of spans) {
    next.traceId = r.traceId;
    next.spanId = r.spanId;
    const parent =
      r.parentSpanId === undefined
        ? ROOT_CONTEXT
        : trace.setSpanContext(ROOT_CONTEXT, {
            traceId: r.traceId,
            spanId: r.parentSpanId,
            traceFlags: TraceFlags.SAMPLED,
          });
    const span = tracer.startSpan(
      r.name,
      {
        startTime: r.startMs,
        attributes: r.attributes,
        links: r.links.map((l) => ({ context: { ...l, traceFlags: TraceFlags.SAMPLED, isRemote: true } })),
      },
      parent,
    );
    for (const e of r.events) span.addEvent(e.name, e.attributes, e.atMs);
    if (r.error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: r.error });
    span.end(r.endMs ?? Date.now());
  }
  if (ended.length === 0) return undefined; // sampled out (OTEL_TRACES_SAMPLER)
  const error = await Promise.race([
    refused,
    new Promise<string | undefined>((resolve) =>
      exporter.export(ended, (res) => resolve(res.code === 0 ? undefined : (res.error?.message ?? 'export failed'))),
    ),
  ]);
  void exporter.shutdown().catch(() => {});
  return error;
}
