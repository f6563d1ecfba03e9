// The status page's routes on the exporter's server (`/` and `/job`): read-only, one read of
// the job states per page (the read a scrape makes, replication included), page reads one at a time.
import type http from 'node:http';
import type { Logger } from '../log.js';
import { readJobStates } from './job-states.js';
import { validateName, validateWindowKey } from '../names.js';
import { renderJob, renderList, renderMessage, renderOccurrence } from './status-page.js';
import { listView, nextDueOf, parseListQuery, stateOf } from './status-view.js';
import type { LeaseStore } from '../store/contract.js';
import { GRID_SIZE, readGrid } from './occurrence-grid.js';
import { columnsOf, JOB_COLUMNS, LIST_COLUMNS, readTimeGrids, timeAxis, type Column } from './time-grid.js';
import { zoneParam } from './status-time.js';

/** Windows and events a job page lists unless asked for more events (`events=N`). */
const WINDOW_LIMIT = 50;
const DEFAULT_EVENT_LIMIT = 200;
const MAX_EVENT_LIMIT = 100_000;
/** Events of one occurrence its page lists. */
const OCCURRENCE_EVENT_LIMIT = 1000;

// Nothing to load from elsewhere and no script: a value that escaped its escaping still could
// not run, nor the page be framed.
const HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'content-security-policy':
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
};

export class StatusPages {
  // One page read at a time: a page reads as much as a scrape, and a reload storm must not
  // take the pool's connections from the scrapes.
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly store: LeaseStore,
    private readonly log: Logger,
  ) {}

  /** Serve `path` if it is a status page (GET or HEAD, checked by the caller); false when it is not one. */
  handle(path: string, params: URLSearchParams, res: http.ServerResponse): boolean {
    let render: (() => Promise<{ status: number; body: string }>) | undefined;
    if (path === '/' || path === '/index.html') render = () => this.list(params);
    else if (path === '/job') render = () => this.job(params);
    else if (path === '/occurrence') render = () => this.occurrence(params);
    if (!render) return false;
    const next = this.queue.then(render);
    this.queue = next.catch(() => {});
    next.then(
      ({ status, body }) => send(res, status, body),
      (err: unknown) => {
        this.log.warn({ err: (err as Error).message, path }, 'status page failed');
        send(
          res,
          503,
          renderMessage(
            'Database unreachable',
            'The exporter could not read the database; see its log. /healthz says when it answers again.',
          ),
        );
      },
    );
    return true;
  }

  private async list(params: URLSearchParams): Promise<{ status: number; body: string }> {
    const [{ dbNow, jobs }, hosts, replication] = await Promise.all([
      readJobStates(this.store),
      this.store.readHostClocks(),
      // Three small reads whatever the number of jobs, as a scrape makes; never fails the page
      // (what the server hides is in `unchecked`, anything else leaves the banner out).
      this.store.readReplication?.().catch((err: unknown) => {
        this.log.warn({ err: (err as Error).message }, 'status page could not read the replication setup');
        return undefined;
      }),
    ]);
    const query = parseListQuery(params);
    const view = listView(dbNow, jobs, hosts, query);
    const shown = view.items.map((i) => i.job);
    const axis = timeAxis(
      dbNow,
      query.every,
      shown.map((j) => j.intervalMs),
      LIST_COLUMNS,
    );
    const grids = await readTimeGrids(this.store, shown, axis);
    const strips = new Map<string, Column[]>();
    for (const i of view.items) {
      const g = grids.get(i.job.name);
      strips.set(i.job.name, columnsOf(axis, g?.cells ?? [], i.nextDue, g?.readFrom));
    }
    return { status: 200, body: renderList(view, this.store, replication, { axis, strips }, zoneParam(params)) };
  }

  private async job(params: URLSearchParams): Promise<{ status: number; body: string }> {
    let name: string;
    try {
      name = validateName(params.get('name') ?? undefined, 'name');
    } catch (err) {
      return { status: 400, body: renderMessage('Not a job name', (err as Error).message) };
    }
    const asked = Number(params.get('events'));
    const eventLimit = Number.isInteger(asked) && asked > 0 ? Math.min(asked, MAX_EVENT_LIMIT) : DEFAULT_EVENT_LIMIT;
    const [{ dbNow, jobs }, windows, events, outputs, retention] = await Promise.all([
      readJobStates(this.store, name),
      this.store.readJobWindows?.(name, WINDOW_LIMIT),
      this.store.readHistory(name, eventLimit),
      this.store.readOutputs?.(name, WINDOW_LIMIT),
      this.store.retention?.read(name),
    ]);
    const job = jobs[0];
    if (!job)
      return { status: 404, body: renderMessage('No such job', `No job named “${name}” is registered in this store.`) };
    const nextDue = nextDueOf(job, dbNow);
    const axis = timeAxis(dbNow, params.get('every'), [job.intervalMs], JOB_COLUMNS);
    const g = (await readTimeGrids(this.store, [job], axis)).get(job.name);
    return {
      status: 200,
      body: renderJob({
        grid: { axis, columns: columnsOf(axis, g?.cells ?? [], nextDue, g?.readFrom) },
        tz: zoneParam(params),
        dbNow,
        job,
        state: stateOf(job),
        nextDue,
        windows,
        events,
        eventLimit,
        outputs: outputs ?? [],
        prunedThroughSeq: retention?.jobs[0]?.prunedThroughSeq ?? 0,
      }),
    };
  }

  private async occurrence(params: URLSearchParams): Promise<{ status: number; body: string }> {
    let name: string;
    let window: string;
    try {
      name = validateName(params.get('name') ?? undefined, 'name');
      window = validateWindowKey(params.get('window') ?? '');
    } catch (err) {
      return { status: 400, body: renderMessage('Not an occurrence', (err as Error).message) };
    }
    const [{ dbNow, jobs }, events, outputs] = await Promise.all([
      readJobStates(this.store, name),
      this.store.readHistory(name, OCCURRENCE_EVENT_LIMIT, window),
      this.store.readOutputs?.(name, WINDOW_LIMIT),
    ]);
    const job = jobs[0];
    if (!job)
      return { status: 404, body: renderMessage('No such job', `No job named “${name}” is registered in this store.`) };
    const grid = await readGrid(this.store, job, GRID_SIZE);
    const cell = grid.find((c) => c.window === window);
    if (!cell && events.length === 0)
      return {
        status: 404,
        body: renderMessage('No such occurrence', `Job “${name}” has no occurrence “${window}” on record.`),
      };
    const output = outputs?.find((o) => o.window === window);
    return {
      status: 200,
      body: renderOccurrence({ dbNow, job: name, window, cell, events, output }, zoneParam(params)),
    };
  }
}

function send(res: http.ServerResponse, status: number, body: string): void {
  // HEAD: the same headers, and Node sends no body.
  res.writeHead(status, { ...HEADERS, 'content-length': Buffer.byteLength(body) }).end(body);
}
