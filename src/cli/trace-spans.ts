// A run's spans for OpenTelemetry, kept as plain records while it runs (acquire, each attempt with
// its child and its finish, a skip, a lost lease, the occurrence's root when this run ends it) and
// sent over OTLP/HTTP once it ends: only when the standard OTEL_* variables ask for it, the SDK
// then loaded (trace-export.ts: from node_modules, or the single executable's asset) and bounded.
// Without them nothing is recorded and nothing is loaded (docs/monitoring.md#a-trace-per-occurrence).
import { hostName } from '../host-name.js';
import type { Logger } from '../log.js';
import { packageVersion } from '../package-root.js';
import type { ChildResult } from '../lease/child.js';
import type { RunResult, TaskContext } from '../lease/types.js';
import type { SpanRecord, SpanValue, TraceProtocol } from './trace-export.js';
import { attemptSpanId, occurrenceTraceId, parseTraceparent, rootSpanId, traceIdOf } from '../trace-context.js';

/** What trace-export.ts gives: its one function. */
export type TraceExporter = Pick<typeof import('./trace-export.js'), 'exportSpans'>;

/** How trace-export.ts is loaded: from node_modules by default, from its asset in the single executable. */
let loadExporter: () => Promise<TraceExporter> = () => import('./trace-export.js');

/** Called by the single executable's entry: it carries the export, with the SDK, as a bundle of its own. */
export function useTraceExporter(load: () => Promise<TraceExporter>): void {
  loadExporter = load;
}

/** What the OTEL_* variables ask for: an export (and how), or none, with why when it is worth a warning. */
export type ExportWish = { export: true; protocol: TraceProtocol } | { export: false; warning?: string };

/**
 * The OpenTelemetry SDK's own switches, read the same way: OTEL_SDK_DISABLED=true, or
 * OTEL_TRACES_EXPORTER without `otlp`, turns export off; an OTLP endpoint (or OTEL_TRACES_EXPORTER=otlp,
 * to the default http://localhost:4318) turns it on. Nothing set: no export.
 */
export function traceExportWish(env: NodeJS.ProcessEnv = process.env): ExportWish {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return { export: false };
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);
  const endpoint = Boolean(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT);
  if (exporters.length > 0 && !exporters.includes('otlp')) {
    const others = exporters.filter((e) => e !== 'none');
    return others.length > 0
      ? { export: false, warning: `OTEL_TRACES_EXPORTER=${others.join(',')}: leasejob exports traces over otlp only` }
      : { export: false };
  }
  if (!endpoint && !exporters.includes('otlp')) return { export: false };
  const protocol = (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL || 'http/protobuf')
    .trim()
    .toLowerCase();
  if (protocol === 'http/protobuf' || protocol === 'http/json') return { export: true, protocol };
  return { export: false, warning: `OTLP protocol ${protocol}: leasejob exports over http/protobuf or http/json only` };
}

// The span ids of spans other than attempts (acquire, child, finish, skip): random, as W3C asks.
// Math.random, not node:crypto: an id identifies, it grants nothing (runner.ts's owner ids).
const randomSpanId = (): string => {
  let s = '';
  for (let i = 0; i < 16; i++) s += Math.floor(Math.random() * 16).toString(16);
  return /^0+$/.test(s) ? '0000000000000001' : s;
};

/**
 * How long the export may hold the exit, unless OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT says otherwise:
 * the SDK's load and one request (and the SDK's own retries of an answer such as 503 within it).
 * A refused connection ends it at once (trace-export.ts).
 */
const EXPORT_LIMIT_MS = 3_000;
/** Once told to stop (a pod's grace period is running): at most this, whatever the timeout says. */
const EXPORT_AFTER_SIGNAL_MS = 1_000;

/** The export's bound: the standard timeout variables (milliseconds), as the SDK reads them, else EXPORT_LIMIT_MS. */
export function exportLimitMs(env: NodeJS.ProcessEnv = process.env, signalled = false): number {
  const set = env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT || env.OTEL_EXPORTER_OTLP_TIMEOUT;
  const ms = set === undefined ? NaN : Number(set.trim());
  const limit = Number.isFinite(ms) && ms > 0 ? ms : EXPORT_LIMIT_MS;
  return signalled ? Math.min(limit, EXPORT_AFTER_SIGNAL_MS) : limit;
}

/** An attempt as it ran, for deciding whether it ended its occurrence. */
interface OpenAttempt {
  span: SpanRecord;
  window: string | undefined;
  attempt: number;
  scheduledAt: Date | undefined;
  /** When this run's first span of the occurrence began: the root's start when there is no scheduled time. */
  firstMs: number;
}

/**
 * The spans of one run (one process), recorded only when `traceExportWish` says so. Each occurrence
 * is one tree: a root span whose id is derived (trace-context.ts's rootSpanId), so that every run
 * on any host parents its acquire, attempts and skips to it; the run that ends the occurrence
 * (completes it, or spends its last attempt) sends the root, started at the scheduled time.
 */
export class RunTrace {
  readonly spans: SpanRecord[] = [];
  private readonly inbound = parseTraceparent(process.env.TRACEPARENT);
  private acquire: SpanRecord | undefined;
  private attempt: OpenAttempt | undefined;
  private child: SpanRecord | undefined;
  private finish: SpanRecord | undefined;

  /** `maxAttempts`: the run's budget as the runner takes it (negative: the default once per occurrence). */
  constructor(
    private readonly job: string,
    private readonly wish: ExportWish,
    private readonly maxAttempts?: number | undefined,
  ) {}

  get recording(): boolean {
    return this.wish.export;
  }

  /** The lease is asked for (a run's window known, or not yet: a sequence, a windowless run). */
  acquiring(window: string | undefined): void {
    if (!this.recording) return;
    const traceId = window === undefined ? '' : occurrenceTraceId(this.job, window);
    const parent = window === undefined ? undefined : rootSpanId(this.job, window, '');
    this.acquire = this.open('acquire', traceId, parent, window === undefined ? {} : { 'leasejob.window': window });
  }

  /** An attempt begins (its window claimed, the lease held): what came before it ends. */
  attemptStarted(ctx: TaskContext): void {
    if (!this.recording) return;
    const now = Date.now();
    // A retry of the same window follows: the attempt before it did not end the occurrence.
    this.closeAttempt(now, this.attempt !== undefined && this.attempt.window !== ctx.window);
    const traceId = traceIdOf(this.job, ctx.window, ctx.fenceToken);
    const root = rootSpanId(this.job, ctx.window, ctx.fenceToken);
    let firstMs = now;
    if (this.acquire) {
      // A sequence's or a windowless run's acquire joins its first attempt's trace.
      if (this.acquire.traceId === '') {
        this.acquire.traceId = traceId;
        this.acquire.parentSpanId = root;
      }
      this.acquire.endMs = now;
      this.acquire.attributes['leasejob.fence_token'] = ctx.fenceToken;
      firstMs = this.acquire.startMs;
      this.acquire = undefined;
    }
    const attrs: Record<string, SpanValue> = {
      'leasejob.attempt': ctx.attempt,
      'leasejob.fence_token': ctx.fenceToken,
      'leasejob.owner': ctx.owner,
      ...(ctx.window === undefined ? {} : { 'leasejob.window': ctx.window }),
      ...(ctx.scheduledAt ? { 'leasejob.scheduled_at': ctx.scheduledAt.toISOString() } : {}),
    };
    const span = this.open('attempt', traceId, root, attrs, now);
    span.spanId = attemptSpanId(this.job, ctx.window, ctx.fenceToken, ctx.attempt);
    if (this.inbound) span.links.push(this.inbound);
    this.attempt = { span, window: ctx.window, attempt: ctx.attempt, scheduledAt: ctx.scheduledAt, firstMs };
  }

  childStarted(pid: number): void {
    if (!this.attempt) return;
    this.child = this.open('child', this.attempt.span.traceId, this.attempt.span.spanId, { 'process.pid': pid });
  }

  /** The child is gone (its group too): recording the outcome follows, as the finish span. */
  childExited(result: ChildResult): void {
    const { child } = this;
    const attempt = this.attempt?.span;
    if (!attempt || !child) return;
    const now = Date.now();
    child.endMs = now;
    if (result.exitCode !== null) child.attributes['process.exit.code'] = result.exitCode;
    if (result.signal) child.attributes['leasejob.signal'] = result.signal;
    if (result.code !== 0) child.error = result.signal ? `killed by ${result.signal}` : `exit code ${result.code}`;
    attempt.attributes['leasejob.exit_code'] = result.code;
    attempt.attributes['leasejob.outcome'] = result.code === 0 ? 'completed' : 'failed';
    if (result.code !== 0) attempt.error = child.error;
    this.child = undefined;
    this.finish = this.open('finish', attempt.traceId, attempt.spanId, {}, now);
  }

  /** The run's result: the last attempt's outcome and exit code, a skip, a lost lease. */
  ended(result: RunResult<ChildResult>, exitCode: number | undefined, window: string | undefined): void {
    if (!this.recording) return;
    const now = Date.now();
    const last = this.attempt?.span;
    if (last && result.status !== 'skipped') {
      const lost = result.status === 'failed' ? result.aborted : undefined;
      if (lost && (lost.kind === 'lease-lost' || lost.kind === 'deadline' || lost.kind === 'replaced')) {
        last.attributes['leasejob.outcome'] = 'lost';
        last.error = `lease lost (${lost.kind})`;
        last.events.push({ name: 'lease lost', atMs: now, attributes: { 'leasejob.reason': lost.kind } });
      } else if (result.status === 'failed' && last.attributes['leasejob.outcome'] === undefined) {
        last.attributes['leasejob.outcome'] = 'failed';
        last.error = result.error instanceof Error ? result.error.message : 'failed';
      }
      if (exitCode !== undefined) last.attributes['leasejob.exit_code'] = exitCode;
    }
    this.closeAttempt(now, true);
    if (result.status === 'skipped') this.skipped(result, now, window);
    if (this.acquire) {
      // Never got to an attempt (skipped, or failed before one): its trace is the window's, if any.
      if (this.acquire.traceId === '') this.spans.splice(this.spans.indexOf(this.acquire), 1);
      else this.acquire.endMs = now;
      this.acquire = undefined;
    }
  }

  /** Sends the spans, bounded; a failure is a warning, never the run's. */
  async export(log: Logger, signalled: boolean): Promise<void> {
    if (!this.wish.export || this.spans.length === 0) return;
    const limitMs = exportLimitMs(process.env, signalled);
    const started = Date.now();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<string>((resolve) => (timer = setTimeout(() => resolve('timed out'), limitMs)));
    const protocol = this.wish.protocol;
    // Resource attributes, as the OpenTelemetry conventions put them: the host is the node name
    // leasejob records (LEASEJOB_NODE_NAME, else the hostname); OTEL_RESOURCE_ATTRIBUTES overrides.
    const resource = {
      'service.name': 'leasejob',
      'service.version': packageVersion(),
      'host.name': hostName(),
      'leasejob.job': this.job,
    };
    const sent = loadExporter().then(
      (m) =>
        m
          .exportSpans(this.spans, protocol, resource)
          .catch((err: unknown) => `the export failed (${(err as Error).message})`),
      (err: unknown) => `the OpenTelemetry SDK could not be loaded (${(err as Error).message})`,
    );
    const error = await Promise.race([sent, timedOut]);
    clearTimeout(timer);
    if (error === undefined)
      log.debug({ spans: this.spans.length, durationMs: Date.now() - started }, 'spans exported');
    else log.warn({ spans: this.spans.length, err: error }, 'trace export failed; the run is unaffected');
  }

  private skipped(result: Extract<RunResult<unknown>, { status: 'skipped' }>, now: number, window: string | undefined) {
    if (window === undefined || result.reason === 'cancelled') return;
    const span = this.open('skip', occurrenceTraceId(this.job, window), rootSpanId(this.job, window, ''), {
      'leasejob.window': window,
      'leasejob.skip_reason': result.reason,
      ...(result.holder ? { 'leasejob.holder': result.holder } : {}),
      ...(result.attempts === undefined ? {} : { 'leasejob.attempts': result.attempts }),
    });
    span.startMs = this.acquire?.startMs ?? now;
    span.endMs = now;
  }

  /** Ends the open attempt's spans; `last`: no retry of its window follows in this run. */
  private closeAttempt(now: number, last: boolean): void {
    const open = this.attempt;
    for (const s of [this.child, this.finish, open?.span]) if (s && s.endMs === undefined) s.endMs = now;
    this.child = this.finish = this.attempt = undefined;
    if (open && last && this.endsOccurrence(open)) this.root(open, now);
  }

  /**
   * Whether the attempt left its occurrence final for the triggers (docs/occurrence.md): completed,
   * or its failure spent the budget (`--max-attempts`, or the default once per occurrence, which a
   * lost attempt does not spend). A windowless run's trace is its own: it always ends it.
   */
  private endsOccurrence(open: OpenAttempt): boolean {
    const outcome = open.span.attributes['leasejob.outcome'];
    if (open.window === undefined || outcome === 'completed') return true;
    const max = this.maxAttempts;
    if (max === undefined || outcome === undefined) return false;
    return max > 0 ? open.attempt >= max : outcome === 'failed';
  }

  /** The occurrence's root: from its scheduled time (else this run's first span of it) to now. */
  private root(open: OpenAttempt, now: number): void {
    const { span } = open;
    const outcome = span.attributes['leasejob.outcome'];
    const fence = String(span.attributes['leasejob.fence_token']);
    const root = this.open('occurrence', span.traceId, undefined, {
      'leasejob.job': this.job,
      ...(open.window === undefined ? { 'leasejob.fence_token': fence } : { 'leasejob.window': open.window }),
      ...(open.scheduledAt ? { 'leasejob.scheduled_at': open.scheduledAt.toISOString() } : {}),
      'leasejob.outcome':
        outcome === 'completed' || open.window === undefined
          ? String(outcome)
          : (this.maxAttempts ?? 0) > 0
            ? 'exhausted'
            : 'failed',
      'leasejob.attempts': open.attempt,
    });
    root.spanId = rootSpanId(this.job, open.window, fence);
    root.startMs = Math.min(open.scheduledAt?.getTime() ?? open.firstMs, open.firstMs);
    root.endMs = now;
    if (outcome !== 'completed') root.error = span.error;
  }

  private open(
    name: string,
    traceId: string,
    parentSpanId: string | undefined,
    attributes: Record<string, SpanValue>,
    startMs = Date.now(),
  ): SpanRecord {
    const span: SpanRecord = {
      name,
      traceId,
      spanId: randomSpanId(),
      parentSpanId,
      startMs,
      attributes,
      events: [],
      links: [],
    };
    this.spans.push(span);
    return span;
  }
}
