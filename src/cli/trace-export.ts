// The recorded spans of a run (trace-spans.ts) sent over OTLP/HTTP with the OpenTelemetry JS SDK.
// Imported only when the OTEL_* variables ask for an export: a run without them loads none of it.
// The SDK reads the rest of the standard variables itself (endpoint, headers, timeout,
// compression, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES).
import { ROOT_CONTEXT, SpanStatusCode, TraceFlags, trace } from '@opentelemetry/api';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { packageVersion } from '../package-root.js';

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

/** Sends `spans` in one request; resolves with undefined once the collector took them, or with why not. */
export async function exportSpans(spans: SpanRecord[], protocol: TraceProtocol): Promise<string | undefined> {
  // Static imports, both: the CLI bundle is loaded as a script, where import() of a package is not available.
  const exporter = protocol === 'http/json' ? new JsonExporter() : new ProtobufExporter();
  const version = packageVersion();
  // The ids are leasejob's (derived for attempts: trace-context.ts), handed to the SDK as each span starts.
  const next = { traceId: '', spanId: '' };
  const ended: ReadableSpan[] = [];
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'leasejob', 'service.version': version }).merge(
      detectResources({ detectors: [envDetector] }),
    ),
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
  const error = await new Promise<string | undefined>((resolve) =>
    exporter.export(ended, (res) => resolve(res.code === 0 ? undefined : (res.error?.message ?? 'export failed'))),
  );
  void exporter.shutdown().catch(() => {});
  return error;
}
