// --ping-url and --notify-url: what a run tells a healthchecks.io check and a webhook about each
// window it runs. Loaded only when one of them is given; every request is bounded, and a
// failed one is reported to the caller (a warning and a counted event), never thrown.
import { hostname } from 'node:os';
import { attemptSpanId, traceIdOf } from '../trace-context.js';
import { utf8Tail, type OutputTail } from './output-tail.js';

/** The longest one request may take. */
export const REQUEST_TIMEOUT_MS = 3_000;
/** The longest the reports of one finished window may take in all (the ping and the webhook, side by side). */
export const FINISH_LIMIT_MS = 5_000;
/** Once leasejob was told to stop (a pod's grace period is running): the reports get this much. */
export const FINISH_AFTER_SIGNAL_MS = 1_500;
/** healthchecks.io logs the first 100 kB of a ping's body; a server may say less (Ping-Body-Limit). */
export const PING_BODY_LIMIT = 100_000;
/** A failed request is tried once more when at least this much of the limit is left. */
const RETRY_MIN_LEFT_MS = 1_000;
const RETRY_PAUSE_MS = 300;

export type WindowOutcome = 'completed' | 'failed' | 'lost' | 'missed';

export interface WindowStart {
  job: string;
  window?: string | undefined;
  scheduledAt?: Date | undefined;
  attempt: number;
  generation: string;
  owner: string;
}

export interface WindowEnd {
  job: string;
  window?: string | undefined;
  scheduledAt?: Date | undefined;
  attempt?: number | undefined;
  generation?: string | undefined;
  owner?: string | undefined;
  outcome: WindowOutcome;
  /** What leasejob exits with for this window (the child's code, 75 lease lost, 124, 128+N). */
  exitCode?: number | undefined;
  /** The child's own exit status and signal, when it ran and exited. */
  childExitCode?: number | null | undefined;
  signal?: string | null | undefined;
  output?: OutputTail | undefined;
  startedAt?: Date | undefined;
  finishedAt: Date;
  /** Occurrences recorded missed together (catch-up): why, how many, the oldest and the newest. */
  missed?: MissedReport | undefined;
}

interface MissedOccurrence {
  key: string;
  scheduledAt?: Date | undefined;
}

export interface MissedReport {
  reason: 'max-delay' | 'catch-up-limit';
  count: number;
  oldest: MissedOccurrence;
  newest: MissedOccurrence;
}

/** A request that failed: never the URL (a secret), only which one, at which stage, and why. */
export interface HookFailure {
  target: 'ping' | 'notify';
  stage: string;
  error: string;
}

export interface HookTargets {
  pingUrl?: string | undefined;
  notifyUrl?: string | undefined;
  userAgent: string;
  /** --trace-link-template: a trace id's link in a trace viewer, the webhook's trace_url. */
  traceLink?: ((traceId: string) => string) | undefined;
}

/**
 * The reports of one run, window by window: `started` as each window's child starts (not
 * awaited: the child never waits for it), `finished` once its outcome is recorded (awaited,
 * within FINISH_LIMIT_MS). `backfill` and `--catch-up` call both once per window.
 */
export class RunHooks {
  private current: { rid: string; start: Promise<void>; window: string | undefined } | undefined;
  private bodyLimit = PING_BODY_LIMIT;

  constructor(
    private readonly targets: HookTargets,
    private readonly onFailure: (f: HookFailure) => void,
  ) {}

  /** The start ping: the check by its URL, the run by its id, the occurrence's trace in the body. */
  started(w: WindowStart): void {
    const rid = runId();
    // Measured from here by healthchecks.io: the duration of the run, and "started, never ended" alerts.
    // The start's body names the occurrence's trace (the end's is the output): healthchecks.io
    // shows it with the run, so its alert leads to the trace.
    const trace = Buffer.from(
      `trace_id=${traceIdOf(w.job, w.window, w.generation)} span_id=${attemptSpanId(w.job, w.window, w.generation, w.attempt)}\n`,
    );
    const start =
      this.targets.pingUrl === undefined
        ? Promise.resolve()
        : this.ping('start', rid, trace, REQUEST_TIMEOUT_MS).catch(() => {});
    this.current = { rid, start, window: w.window };
  }

  /** A skipped run (busy, done, paused) is not reported: call this only for a window's end. */
  async finished(e: WindowEnd, signal?: AbortSignal): Promise<void> {
    const deadline = Date.now() + (signal?.aborted ? FINISH_AFTER_SIGNAL_MS : FINISH_LIMIT_MS);
    // The start of this very window (a missed one, or one that never started, has none).
    const run = this.current?.window === e.window ? this.current : undefined;
    this.current = undefined;
    const work: Array<Promise<void>> = [];
    if (this.targets.pingUrl !== undefined && e.outcome !== 'missed') {
      work.push(
        (async () => {
          // After the start ping (healthchecks.io pairs them by rid), within what is left.
          if (run) await Promise.race([run.start, sleepUntil(deadline)]);
          const suffix =
            e.outcome === 'completed'
              ? ''
              : e.exitCode !== undefined && e.exitCode >= 1 && e.exitCode <= 255
                ? String(e.exitCode)
                : 'fail';
          const body = e.output && e.output.tail.length > 0 ? utf8Tail(e.output.tail, this.bodyLimit) : undefined;
          await this.ping(suffix === '' ? 'success' : suffix, run?.rid, body, deadline - Date.now(), deadline);
        })(),
      );
    }
    if (this.targets.notifyUrl !== undefined && e.outcome !== 'completed') {
      work.push(
        this.send(
          'notify',
          e.outcome,
          this.targets.notifyUrl,
          JSON.stringify(payload(e, this.targets.traceLink)),
          'application/json',
          deadline - Date.now(),
          deadline,
        ).then(() => {}),
      );
    }
    // Each request is cut off at the deadline itself; this only guards against a stray one.
    await Promise.race([Promise.all(work), sleepUntil(deadline + 500)]);
  }

  private async ping(
    stage: string,
    rid: string | undefined,
    body: Buffer | undefined,
    timeoutMs: number,
    deadline = Date.now() + timeoutMs,
  ): Promise<void> {
    const url = pingTarget(this.targets.pingUrl!, stage === 'success' ? '' : stage, rid);
    const res = await this.send('ping', stage, url, body, 'text/plain; charset=utf-8', timeoutMs, deadline);
    // The server's own limit for the body of the pings that follow (as runitor reads it).
    const limit = Number(res?.headers.get('ping-body-limit'));
    if (Number.isSafeInteger(limit) && limit > 0) this.bodyLimit = Math.min(PING_BODY_LIMIT, limit);
  }

  /** One POST, tried once more after a network error or a 5xx/429 while time is left; never rejects. */
  private async send(
    target: HookFailure['target'],
    stage: string,
    url: string,
    body: string | Buffer | undefined,
    type: string,
    timeoutMs: number,
    deadline: number,
  ): Promise<Response | undefined> {
    for (let tries = 1; ; tries++) {
      let error: string;
      let retry: boolean;
      try {
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': type, 'user-agent': this.targets.userAgent },
          body,
          redirect: 'follow',
          signal: AbortSignal.timeout(Math.max(1, Math.min(timeoutMs, REQUEST_TIMEOUT_MS, deadline - Date.now()))),
        });
        // Read to the end, so that the connection is free (or closed) before leasejob exits.
        await res.arrayBuffer().catch(() => undefined);
        if (res.ok) return res;
        error = `HTTP ${res.status}`;
        retry = res.status >= 500 || res.status === 429;
      } catch (err) {
        const e = err as Error & { cause?: { code?: string } };
        if (deadline - Date.now() <= 0 && e.name !== 'TimeoutError') {
          this.onFailure({ target, stage, error: 'timed out' });
          return undefined;
        }
        // Never the message of a URL error: it may quote the URL.
        error = e.name === 'TimeoutError' || e.name === 'AbortError' ? 'timed out' : (e.cause?.code ?? e.name);
        retry = e.name !== 'TimeoutError' && e.name !== 'AbortError';
      }
      if (!retry || tries >= 2 || deadline - Date.now() < RETRY_MIN_LEFT_MS + RETRY_PAUSE_MS) {
        this.onFailure({ target, stage, error });
        return undefined;
      }
      await sleepUntil(Date.now() + RETRY_PAUSE_MS);
    }
  }
}

/** The ping URL with a healthchecks.io suffix (`start`, `fail`, an exit status) and the run id, its own query kept. */
export function pingTarget(base: string, suffix: string, rid: string | undefined): string {
  const url = new URL(base);
  // Without its trailing slash in every case: `/<key>/<slug>/` is another check (a 404) at healthchecks.io.
  const path = url.pathname.replace(/\/+$/, '');
  url.pathname = suffix === '' ? path || '/' : `${path}/${suffix}`;
  if (rid !== undefined) url.searchParams.set('rid', rid);
  return url.href;
}

/** The webhook's JSON (docs/notifications.md): snake_case, instants in ISO-8601 UTC. */
export function payload(e: WindowEnd, traceLink?: (traceId: string) => string): Record<string, unknown> {
  const traceId =
    e.window !== undefined || e.generation !== undefined ? traceIdOf(e.job, e.window, e.generation ?? '') : null;
  return {
    event: e.outcome,
    job: e.job,
    window: e.window ?? null,
    scheduled_at: e.scheduledAt?.toISOString() ?? null,
    attempt: e.attempt ?? null,
    generation: e.generation ?? null,
    exit_code: e.exitCode ?? null,
    child_exit_code: e.childExitCode ?? null,
    signal: e.signal ?? null,
    host: hostname(),
    owner: e.owner ?? null,
    started_at: e.startedAt?.toISOString() ?? null,
    finished_at: e.finishedAt.toISOString(),
    duration_ms: e.startedAt ? e.finishedAt.getTime() - e.startedAt.getTime() : null,
    // The occurrence's trace (the child's TRACEPARENT), so an alert leads to it: derived, as
    // trace-context.ts says; the attempt's span when a lease was taken.
    trace_id: traceId,
    // With --trace-link-template: the trace in the viewer it names.
    trace_url: traceId !== null && traceLink ? traceLink(traceId) : null,
    span_id:
      e.generation !== undefined && e.attempt !== undefined
        ? attemptSpanId(e.job, e.window, e.generation, e.attempt)
        : null,
    output: e.output
      ? {
          tail: utf8Tail(e.output.tail, e.output.tail.length).toString('utf8'),
          bytes: e.output.bytes,
          truncated: e.output.bytes > e.output.tail.length,
        }
      : null,
    missed: e.missed
      ? {
          reason: e.missed.reason,
          count: e.missed.count,
          oldest_window: e.missed.oldest.key,
          oldest_scheduled_at: e.missed.oldest.scheduledAt?.toISOString() ?? null,
          newest_window: e.missed.newest.key,
          newest_scheduled_at: e.missed.newest.scheduledAt?.toISOString() ?? null,
        }
      : null,
  };
}

/**
 * A version 4 UUID, as healthchecks.io wants a run id. It identifies, it grants nothing, so
 * Math.random rather than node:crypto (kept off the run path, see newOwnerId in runner.ts).
 */
export function runId(): string {
  const hex = Array.from({ length: 32 }, () => Math.floor(Math.random() * 16).toString(16));
  hex[12] = '4';
  hex[16] = ((Number.parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16);
  const h = hex.join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function sleepUntil(at: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, at - Date.now())).unref());
}
