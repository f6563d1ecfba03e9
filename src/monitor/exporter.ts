// Prometheus exporter: every scrape reads the database with a few set-based queries and
// exposes absence (overdue windows), lease health, run outcomes and clock signals.
import http from 'node:http';
import { Counter, Gauge, Registry } from 'prom-client';
import { monoNow } from '../clock.js';
import type { Logger } from '../log.js';
import { labelText, MetricRows } from './metric-rows.js';
import { readJobStates } from './job-states.js';
import { acceptsGzip, ScrapeBody } from './scrape-body.js';
import { sharedRead } from './shared-read.js';
import { StatusPages } from './status-server.js';
import type { LeaseStore } from '../store/contract.js';
import { latestSchemaVersion } from '../store/choice.js';

/** The attempt budget's families (run --max-attempts, --retry-delay). */
function attemptMetrics() {
  return {
    exhausted: new MetricRows(
      'leasejob_exhausted_occurrences',
      'occurrences whose attempt budget (run --max-attempts) is spent and that did not complete: final until ' +
        'run --rerun or leasejob mark (counted in leasejob_failed_occurrences too)',
      'gauge',
    ),
    occurrences: new MetricRows(
      'leasejob_occurrences',
      "occurrences scheduled within the job's lookback (--alert-lookback, else a day) by the reason each ended as, " +
        'each counted once: completed, caught-up, backfilled, running, failed (attempts left), exhausted, ' +
        'skipped-paused, skipped-marked, skipped-busy (no ledger row), skipped-replaced, skipped-backoff, ' +
        'missed-max-delay, missed-catch-up-limit, missed-other',
      'gauge',
    ),
    budgetSkips: new MetricRows(
      'leasejob_attempt_skips_total',
      'runs that skipped their occurrence for its attempts: reason exhausted (run --max-attempts spent) or ' +
        'backoff (within --retry-delay of its last failure)',
      'counter',
    ),
  };
}

function metrics(registry: Registry) {
  const g = (name: string, help: string, labelNames: string[] = []) =>
    new Gauge({ name, help, labelNames, registers: [registry] });
  const c = (name: string, help: string, labelNames: string[]) =>
    new Counter({ name, help, labelNames, registers: [registry] });
  // Per-job families, labelled as add() is given them (job; job, outcome; job, host): see metric-rows.ts.
  const rg = (name: string, help: string) => new MetricRows(name, help, 'gauge');
  const rc = (name: string, help: string) => new MetricRows(name, help, 'counter');
  return {
    ...attemptMetrics(),
    up: g(
      'leasejob_up',
      '1 when the exporter reached the database on this scrape; at 0 the other series are the last ones read',
    ),
    scrape: g('leasejob_scrape_duration_seconds', 'time spent reading the database for this scrape'),
    jobs: g('leasejob_jobs', 'registered jobs'),
    overdue: rg('leasejob_window_overdue', '1 when the latest due window plus its grace is not completed'),
    notCompleted: rg(
      'leasejob_due_occurrences_not_completed',
      'due occurrences within the lookback, past their grace, not completed (the latest included): failed, lost, missed, or never run',
    ),
    failed: rg(
      'leasejob_failed_occurrences',
      'occurrences whose run failed (failed, lost, abandoned) and that no later run redid: due ones ' +
        'within the lookback, and those still within their grace (with run --max-attempts: exhausted, or past their grace)',
    ),
    lastCompleted: rg(
      'leasejob_last_completed_window_timestamp_seconds',
      'when the last window of the job was completed (database clock)',
    ),
    held: rg('leasejob_lease_held', '1 while the lease is held (not expired)'),
    generation: rg('leasejob_lease_generation', 'current lease generation (the fencing token)'),
    expiresIn: rg('leasejob_lease_expires_in_seconds', 'seconds until the held lease expires unless renewed'),
    heldFor: rg(
      'leasejob_lease_held_seconds',
      'how long the current generation has been held; a stuck owner grows without bound',
    ),
    open: rg('leasejob_open_windows', 'windows claimed and not completed'),
    version: rg(
      'leasejob_job_version',
      "the job record's version: bumped by registry changes, pause, resume, mark and administrative release",
    ),
    paused: rg(
      'leasejob_job_paused',
      '1 while the job is paused (leasejob pause): its runs skip, and it is not overdue',
    ),
    pausedSince: rg('leasejob_job_paused_since_timestamp_seconds', 'when the current pause began (database clock)'),
    pausedUntil: rg(
      'leasejob_job_paused_until_timestamp_seconds',
      'when the current pause ends by itself; absent: until resumed',
    ),
    pauseInfo: rg(
      'leasejob_job_pause_info',
      "the current pause's reason and who paused it (user@host), as labels; always 1",
    ),
    lastDuration: rg('leasejob_last_duration_seconds', 'duration of the last completed window'),
    ratio: rg(
      'leasejob_duration_interval_ratio',
      'last duration over the schedule interval; above 0.5 overlap is no longer hypothetical',
    ),
    durationUnexpected: rg(
      'leasejob_duration_outside_expected',
      "1 when the run now past --expect-duration's maximum, or else the latest completed one, is " +
        'outside the bounds; only for jobs with --expect-duration',
    ),
    expectMin: rg('leasejob_expected_duration_min_seconds', "--expect-duration's minimum; absent without one"),
    expectMax: rg('leasejob_expected_duration_max_seconds', "--expect-duration's maximum; absent without one"),
    runs: rc('leasejob_runs_total', 'finished windows by outcome (completed, failed, missed)'),
    skips: rc('leasejob_busy_skips_total', 'runs that skipped because a live owner held the lease'),
    doneSkips: rc(
      'leasejob_done_skips_total',
      'runs that skipped because their window was already completed (late duplicates, a second host)',
    ),
    pausedSkips: rc('leasejob_paused_skips_total', 'runs that skipped because the job was paused (leasejob pause)'),
    lost: rc('leasejob_leases_lost_total', 'leases lost while running (child stopped)'),
    takeovers: rc('leasejob_stale_takeovers_total', 'leases taken over from a stale (crashed or paused) owner'),
    renewFailures: rc('leasejob_renew_failures_total', 'episodes of failed renewals that later recovered'),
    fenceRefusals: rc('leasejob_fence_refusals_total', 'writes refused by assert_lease, as recorded by children'),
    notifyFailures: rc(
      'leasejob_notify_failures_total',
      'pings (--ping-url) and webhook calls (--notify-url) that failed or timed out',
    ),
    offset: g(
      'leasejob_clock_offset_seconds',
      'database clock minus host wall clock, from the latest run on the host (its latest precise measurement, else its least uncertain)',
      ['host'],
    ),
    offsetUncertainty: g('leasejob_clock_offset_uncertainty_seconds', 'half the round trip of that measurement', [
      'host',
    ]),
    jumps: c('leasejob_clock_jumps_total', 'wall-clock jumps detected by runners', ['host']),
    // Rows, not prom-client gauges: a gauge reset for the next scrape still says 0, and an
    // applied version that could not be read must be absent, not 0.
    schema: rg('leasejob_schema_version', 'the newest migration applied to the schema'),
    // What a failover can lose (replication.ts); absent when the server hides it.
    replicationMode: rg(
      'leasejob_replication_mode',
      '1 for the replication setup leasejob sees: mode is synchronous, asynchronous (a failover can ' +
        'lose commits), single (no standby seen), standby (runs refused), embedded or unknown',
    ),
    replicationStandbys: rg('leasejob_replication_standbys', 'streaming standbys of the server leasejob uses'),
    replicationSync: rg(
      'leasejob_replication_synchronous_standbys',
      "standbys in sync or in the quorum (absent when hidden from leasejob's role: grant pg_monitor)",
    ),
    replicationUnchecked: rg(
      'leasejob_replication_unchecked',
      "parts of the replication setup the server hides from leasejob's role (see `leasejob check`)",
    ),
    fenceEpoch: rg(
      'leasejob_fence_epoch',
      'the epoch of the tokens issued now: it advances when the database is promoted, restored or replaced',
    ),
    schemaExpected: rg(
      'leasejob_schema_version_expected',
      'the newest migration this leasejob ships; above leasejob_schema_version, run `leasejob migrate`',
    ),
  };
}

const RUN_KINDS: Record<string, string> = {
  'window-completed': 'completed',
  'window-failed': 'failed',
  'window-missed': 'missed',
};
const PER_JOB: Record<
  string,
  'lost' | 'takeovers' | 'renewFailures' | 'fenceRefusals' | 'notifyFailures' | 'pausedSkips'
> = {
  'lease-lost': 'lost',
  'stale-takeover': 'takeovers',
  'renew-failed': 'renewFailures',
  'fence-refused': 'fenceRefusals',
  'notify-failed': 'notifyFailures',
  'paused-skip': 'pausedSkips',
};
/** The event kinds a scrape exports; the others (acquired, released, ...) are not read. */
const BUDGET_SKIPS: Record<string, string> = { 'exhausted-skip': 'exhausted', 'backoff-skip': 'backoff' };
const EXPORTED_KINDS = [
  ...Object.keys(RUN_KINDS),
  ...Object.keys(PER_JOB),
  ...Object.keys(BUDGET_SKIPS),
  'busy-skip',
  'done-skip',
  'clock-jump',
];

export class Exporter {
  readonly registry = new Registry();
  private readonly m = metrics(this.registry);
  /** The one read in flight, shared by every scrape that arrives while it runs (shared-read.ts). */
  private readonly sharedCollect = sharedRead(
    async () => new ScrapeBody(await this.collect()),
    (served) => this.log.debug({ served }, 'scrape read shared'),
  );
  /** The newest migration this leasejob ships (read from sql/ once). */
  private expectedSchema: Promise<number> | undefined;
  /** Scrapes that read the database and rendered every family. */
  scrapesServed = 0;
  /**
   * What the last scrape that read the database said, but for the three families about the
   * scrape itself: served again while the database cannot be read, so that an outage does not
   * resolve every per-job alert (and page anew, with a new activeAt, when it ends).
   */
  private lastState: string | undefined;
  /** When a scrape last read the database (host clock, seconds). */
  private lastReadSeconds: number | undefined;
  private readonly lastRead = new MetricRows(
    'leasejob_last_read_timestamp_seconds',
    'when a scrape last read the database (host clock): while leasejob_up is 0, every other series is as read then',
    'gauge',
  );

  constructor(
    private readonly store: LeaseStore,
    private readonly log: Logger,
  ) {}

  /**
   * Read the database and render the exposition text: one read at a time, and a scrape that
   * arrives while one runs is answered by it (a flood of scrapes costs one read, not a queue).
   */
  async scrape(): Promise<string> {
    return (await this.sharedCollect()).text;
  }

  /** GET /metrics: the shared read's bytes, gzipped when the scraper takes gzip (Prometheus does). */
  private async answerMetrics(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const body = await this.sharedCollect();
    const headers = { 'content-type': this.registry.contentType, vary: 'Accept-Encoding' };
    if (acceptsGzip(req.headers['accept-encoding']))
      res.writeHead(200, { ...headers, 'content-encoding': 'gzip' }).end(await body.gzip());
    else res.writeHead(200, headers).end(body.plain);
  }

  private async collect(): Promise<string> {
    const started = monoNow();
    for (const metric of Object.values(this.m)) metric.reset();
    this.lastRead.reset();
    let up = true;
    try {
      await this.load();
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'scrape could not read the database');
      up = false;
    }
    this.m.up.set(up ? 1 : 0);
    this.m.scrape.set((monoNow() - started) / 1000);
    if (up) this.lastReadSeconds = Date.now() / 1000;
    if (this.lastReadSeconds !== undefined) this.lastRead.add('', this.lastReadSeconds);
    const about = [
      await this.registry.getSingleMetricAsString('leasejob_up'),
      await this.registry.getSingleMetricAsString('leasejob_scrape_duration_seconds'),
      ...(this.lastReadSeconds === undefined ? [] : [this.lastRead.render()]),
    ];
    if (up) {
      // prom-client's metrics, then the per-job families, a blank line between families as it does.
      const others = this.registry
        .getMetricsAsArray()
        .filter((f) => f.name !== 'leasejob_up' && f.name !== 'leasejob_scrape_duration_seconds');
      const families = Object.values(this.m).filter((f): f is MetricRows => f instanceof MetricRows);
      this.lastState = [
        ...(await Promise.all(others.map((f) => this.registry.getSingleMetricAsString(f.name)))),
        ...families.map((f) => f.render()),
      ].join('\n\n');
      this.scrapesServed++;
    }
    // Down: the last state read, marked stale by leasejob_up 0 and its read time; before any
    // read, only what is known (`leasejob_jobs 0` beside `leasejob_up 0` would read as "no jobs").
    return `${[...about, ...(this.lastState === undefined ? [] : [this.lastState])].join('\n\n')}\n`;
  }

  private async load(): Promise<void> {
    this.expectedSchema ??= latestSchemaVersion().catch((err: unknown) => {
      this.expectedSchema = undefined; // read again at the next scrape
      throw err;
    });
    const [{ jobs }, counts, hosts, schema, expected, replication, occurrences] = await Promise.all([
      readJobStates(this.store),
      this.store.readEventCounts(EXPORTED_KINDS),
      this.store.readHostClocks(),
      this.store.readSchemaVersion?.(),
      this.expectedSchema,
      // Never fails the scrape: what the server hides is in `unchecked`, anything else is left out.
      this.store.readReplication?.().catch((err: unknown) => {
        this.log.warn({ err: (err as Error).message }, 'scrape could not read the replication setup');
        return undefined;
      }),
      this.store.readOccurrenceCounts?.(),
    ]);
    const m = this.m;
    for (const o of occurrences ?? []) m.occurrences.add(labelText({ job: o.job, reason: o.reason }), Number(o.n));
    m.jobs.set(jobs.length);
    // A schema behind still works, without what its missing migrations bring; said by a
    // scrape, since `run` does not check (it would cost a statement on every run).
    if (schema !== undefined) m.schema.add('', schema);
    m.schemaExpected.add('', expected);
    if (replication) {
      m.replicationMode.add(labelText({ mode: replication.mode }), 1);
      if (replication.standbys !== null) m.replicationStandbys.add('', replication.standbys);
      if (replication.synchronousStandbys !== null) m.replicationSync.add('', replication.synchronousStandbys);
      m.replicationUnchecked.add('', replication.unchecked.length);
      if (replication.fenceEpoch !== null) m.fenceEpoch.add('', replication.fenceEpoch);
    }
    for (const j of jobs) {
      const job = labelText({ job: j.name });
      if (j.due) m.overdue.add(job, j.overdue ? 1 : 0);
      if (j.due || j.notCompletedCount > 0) m.notCompleted.add(job, j.notCompletedCount);
      // Every job from its registration: LeasejobDueOccurrencesNotCompleted reads it with `unless`.
      m.failed.add(job, j.failedOccurrences);
      m.exhausted.add(job, j.exhaustedOccurrences);
      if (j.lastCompletedAt) m.lastCompleted.add(job, j.lastCompletedAt.getTime() / 1000);
      m.held.add(job, j.held ? 1 : 0);
      if (j.generation !== null) m.generation.add(job, Number(j.generation));
      if (j.held) {
        m.expiresIn.add(job, (j.expiresInMs ?? 0) / 1000);
        m.heldFor.add(job, (j.heldForMs ?? 0) / 1000);
      }
      m.open.add(job, j.openCount);
      m.version.add(job, j.version);
      m.paused.add(job, j.paused ? 1 : 0);
      if (j.paused && j.pause) {
        m.pausedSince.add(job, j.pause.since.getTime() / 1000);
        if (j.pause.until) m.pausedUntil.add(job, j.pause.until.getTime() / 1000);
        m.pauseInfo.add(labelText({ job: j.name, reason: j.pause.reason ?? '', by: j.pause.by ?? '' }), 1);
      }
      // 0 from the job's first scrape: Prometheus's increase() skips a series' first sample, so a
      // series that first appeared at 1 would never fire LeasejobLeaseLost for that first loss.
      m.lost.addTo(j.name, job, 0);
      // The same for LeasejobNotifyFailures: a job whose ping URL is wrong fails from its first run.
      m.notifyFailures.addTo(j.name, job, 0);
      if (j.expectMinMs !== null || j.expectMaxMs !== null) {
        m.durationUnexpected.add(job, j.durationUnexpected === null ? 0 : 1);
        if (j.expectMinMs !== null) m.expectMin.add(job, j.expectMinMs / 1000);
        if (j.expectMaxMs !== null) m.expectMax.add(job, j.expectMaxMs / 1000);
      }
      if (j.lastDurationMs !== null) {
        m.lastDuration.add(job, j.lastDurationMs / 1000);
        if (j.intervalMs) m.ratio.add(job, j.lastDurationMs / j.intervalMs);
      }
    }
    // One row per (job, kind, host) in event_counts: busy skips keep the host, the other
    // per-job counts are summed over hosts.
    for (const r of counts) {
      const outcome = RUN_KINDS[r.kind];
      const family = PER_JOB[r.kind];
      const skip = BUDGET_SKIPS[r.kind];
      if (outcome) m.runs.addTo(`${r.job}\u0000${outcome}`, labelText({ job: r.job, outcome }), r.n);
      else if (skip) m.budgetSkips.addTo(`${r.job}\u0000${skip}`, labelText({ job: r.job, reason: skip }), r.n);
      else if (family) m[family].addTo(r.job, labelText({ job: r.job }), r.n);
      else if (r.kind === 'busy-skip') m.skips.add(labelText({ job: r.job, host: r.host }), r.n);
      else if (r.kind === 'done-skip') m.doneSkips.add(labelText({ job: r.job, host: r.host }), r.n);
      else if (r.kind === 'clock-jump') m.jumps.inc({ host: r.host }, r.n);
    }
    for (const h of hosts) {
      m.offset.set({ host: h.host }, h.offsetMs / 1000);
      m.offsetUncertainty.set({ host: h.host }, h.uncertaintyMs / 1000);
    }
  }

  /** HTTP server: /metrics (Prometheus text), /healthz (200 when the database answers), the status page at / and /job. */
  createServer(opts: { statusPage?: boolean } = {}): http.Server {
    const pages = opts.statusPage === false ? undefined : new StatusPages(this.store, this.log);
    return http.createServer((req, res) => {
      const url = req.url ?? '/';
      const q = url.indexOf('?');
      const path = q < 0 ? url : url.slice(0, q);
      const query = q < 0 ? '' : url.slice(q + 1);
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        // Read-only: nothing here changes the database.
        res.writeHead(405, { allow: 'GET, HEAD' }).end();
        return;
      }
      if (pages?.handle(path, new URLSearchParams(query), res)) return;
      if (path === '/metrics') {
        this.answerMetrics(req, res).catch((err: unknown) => res.writeHead(500).end(String((err as Error).message)));
      } else if (path === '/healthz') {
        this.store.ping().then(
          () => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n'),
          () => res.writeHead(503, { 'content-type': 'text/plain' }).end('database unreachable\n'),
        );
      } else {
        res
          .writeHead(404, { 'content-type': 'text/plain' })
          .end(`leasejob exporter: see ${pages ? '/, ' : ''}/metrics and /healthz\n`);
      }
    });
  }
}
