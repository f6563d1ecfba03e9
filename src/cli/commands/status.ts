// `leasejob status`, `history` and `check`: what the database says about each job.
import { maskPasswords } from '../../secrets.js';
import { parseDuration } from '../../schedule/duration.js';
import { ExitCode, LeasejobError, UsageError } from '../../errors.js';
import { findProblems, readJobStates, statesToJson } from '../../monitor/job-states.js';
import { validateName, validateWindowKey } from '../../names.js';
import { renderTable } from '../../monitor/table.js';
import type { Logger } from '../../log.js';
import { replicationProblems, type ReplicationReport } from '../../replication.js';
import type { HistoryEvent, LeaseStore, WindowOutput } from '../../store/contract.js';
import { latestSchemaVersion } from '../../store/choice.js';
import { unknownJob, withStore, type DbFlags } from '../with-store.js';
import { Reach, noteReach } from '../../startup/start-reach.js';
import { visibleControls } from '../terminal-text.js';
import { outputWidth, renderStatusTable } from '../status-table.js';
import { countsByJob, readOccurrences, type Occurrence } from '../../monitor/occurrences.js';
import { occurrenceTraceId, traceIdOf } from '../../trace-context.js';
import { traceLink, traceLinkTemplate, useTraceLinks } from '../../monitor/trace-link.js';

/** readJobStates() reads the job rows and the due-window judgement side by side. */
const JOB_STATES_POOL = 2;

const out = (text: string): void => {
  process.stdout.write(text);
};

/**
 * The schema's version against this leasejob's migrations, said on stderr when they differ. A
 * schema behind still works (a new migration changes a function's body, not its signature),
 * but without what the newer migrations bring.
 * `run` does not check: it would cost a statement on every run.
 */
async function checkSchemaVersion(
  store: LeaseStore,
  log: Logger,
): Promise<{ version: number; known: number } | undefined> {
  const schemaVersion = await store.readSchemaVersion?.();
  if (schemaVersion === undefined) return undefined;
  const known = await latestSchemaVersion();
  if (schemaVersion < known)
    log.warn({ schemaVersion, knownVersion: known }, 'schema is behind this leasejob; run `leasejob migrate`');
  // Newer: another host's leasejob migrated it; this one may lack what it relies on.
  if (schemaVersion > known)
    log.warn({ schemaVersion, knownVersion: known }, 'schema is newer than this leasejob; upgrade leasejob');
  return { version: schemaVersion, known };
}

export async function statusCommand(
  flags: DbFlags & { name?: string; json?: boolean; wide?: boolean },
): Promise<number> {
  const name = flags.name !== undefined ? validateName(flags.name) : undefined;
  return withStore({ ...flags, poolSize: JOB_STATES_POOL }, async (store, log) => {
    // The counts by reason only for --json (the table has no column for them): one grouped read.
    const [{ dbNow, jobs }, counts] = await Promise.all([
      readJobStates(store, name),
      flags.json ? store.readOccurrenceCounts?.(name) : undefined,
    ]);
    await checkSchemaVersion(store, log);
    if (name !== undefined && jobs.length === 0) throw unknownJob(name, store.location);
    if (flags.json) {
      const byJob = countsByJob(counts);
      const withCounts = jobs.map((j) => Object.assign(j, { occurrences: byJob.get(j.name) ?? {} }));
      out(statesToJson({ store: store.kind, location: store.location, dbNow, jobs: withCounts }) + '\n');
    } else {
      out(`store: ${store.kind}, ${store.location}, time ${dbNow.toISOString()}\n`);
      out(renderStatusTable(jobs, { width: outputWidth(), wide: flags.wide }));
    }
    return 0;
  });
}

export async function historyCommand(
  flags: DbFlags & {
    name?: string;
    limit?: string;
    window?: string;
    byOccurrence?: boolean;
    json?: boolean;
    traceLinkTemplate?: string;
  },
): Promise<number> {
  const name = validateName(flags.name);
  const template = traceLinkTemplate(flags.traceLinkTemplate);
  // With --trace-link-template: each trace id's link (`traceUrl` in JSON, the TRACE column's text).
  const linkOf = (traceId: string | null): string | null =>
    traceId === null || template === undefined ? null : traceLink(template, traceId);
  const window = flags.window === undefined ? undefined : validateWindowKey(flags.window);
  const most = flags.byOccurrence ? MAX_OCCURRENCES : 100_000;
  const limit = flags.limit === undefined ? 50 : Number(flags.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > most)
    throw new UsageError(`Expected \`--limit\` to be a whole number from 1 to ${most}, got \`${flags.limit}\`.`);
  if (flags.byOccurrence && window !== undefined)
    throw new UsageError(
      "`--by-occurrence` lists occurrences; `--window` shows one occurrence's events: give one of them.",
    );
  if (flags.byOccurrence) return occurrencesCommand(flags, name, limit, linkOf);
  return withStore(flags, async (store) => {
    const events = await store.readHistory(name, limit, window);
    if (events.length === 0 && (await store.readJobRows(name)).rows.length === 0)
      throw unknownJob(name, store.location);
    const outputs = await outputsOf(store, name, events);
    if (flags.json) {
      out(
        JSON.stringify(
          events.map((e) => {
            const o = outputs.get(e);
            // The occurrence's trace (the child's TRACEPARENT, the webhook's trace_id): derived, not stored.
            const traceId =
              e.window === null && e.generation === null ? null : traceIdOf(name, e.window, e.generation ?? '');
            const traced = { ...e, traceId, ...(template === undefined ? {} : { traceUrl: linkOf(traceId) }) };
            return o
              ? {
                  ...traced,
                  output: { tail: o.tail.toString('utf8'), bytes: o.bytes, kept: o.tail.length, attempt: o.attempt },
                }
              : traced;
          }),
          null,
          2,
        ) + '\n',
      );
    } else {
      // The gap before the first kept event is said, not silent (`leasejob prune`).
      const pruned = (await store.retention?.read(name))?.jobs[0];
      if (pruned && pruned.prunedThroughSeq > 0) {
        out(
          `events 1-${pruned.prunedThroughSeq} pruned (leasejob prune, horizon ` +
            `${pruned.retainedFrom?.toISOString() ?? '-'}); kept from seq ${pruned.prunedThroughSeq + 1}\n`,
        );
      }
      out(
        renderTable(
          ['SEQ', 'DB TIME', 'KIND', 'WINDOW', 'GEN', 'OWNER', 'DETAIL'],
          // JSON escapes C0 controls, not C1 ones or bidirectional overrides (a --reason, a host name).
          events.map((e) => [
            e.seq,
            e.dbTime.toISOString(),
            e.kind,
            e.window ?? '-',
            e.generation ?? '-',
            visibleControls(e.owner ?? '-'),
            Object.keys(e.detail).length ? visibleControls(JSON.stringify(e.detail)) : '',
          ]),
        ),
      );
      for (const [e, o] of outputs) {
        const kept = o.tail.length < o.bytes ? `the last ${o.tail.length} of ${o.bytes} bytes` : `${o.bytes} bytes`;
        out(
          `\noutput of window ${e.window}, generation ${o.generation} (seq ${e.seq}, attempt ${o.attempt}, ${e.kind}), ${kept}:\n`,
        );
        // What the child printed, escape sequences included, must not act on this terminal.
        const text = visibleControls(o.tail.toString('utf8'));
        out(text.endsWith('\n') || text === '' ? text : `${text}\n`);
      }
    }
    return 0;
  });
}

/** How many occurrences `history --by-occurrence` lists at most (it reads each one's events). */
const MAX_OCCURRENCES = 1000;

/** `history --by-occurrence`: one line per occurrence with the reason it ended as. */
function occurrencesCommand(
  flags: DbFlags & { json?: boolean },
  name: string,
  limit: number,
  linkOf: (traceId: string) => string | null,
): Promise<number> {
  return withStore(flags, async (store) => {
    const found = await readOccurrences(store, name, limit);
    if (found.length === 0 && (await store.readJobRows(name)).rows.length === 0) throw unknownJob(name, store.location);
    if (flags.json) {
      out(
        JSON.stringify(
          found.map((o) => {
            const traceId = occurrenceTraceId(name, o.window);
            const traceUrl = linkOf(traceId);
            return { ...o, traceId, ...(traceUrl === null ? {} : { traceUrl }) };
          }),
          null,
          2,
        ) + '\n',
      );
      return 0;
    }
    const skipText = (o: Occurrence) =>
      Object.entries(o.skips)
        .map(
          ([kind, hosts]) =>
            `${kind} ${Object.entries(hosts)
              .map(([h, n]) => `${h}×${n}`)
              .join(',')}`,
        )
        .join('; ');
    out(
      renderTable(
        ['WINDOW', 'SCHEDULED', 'REASON', 'OUTCOME', 'ATTEMPTS', 'ENDED', 'SKIPS (HOST×N)', 'TRACE'],
        found.map((o) => [
          o.window,
          o.scheduledAt?.toISOString() ?? '-',
          o.reason,
          o.outcome ?? '-',
          o.maxAttempts === null ? String(o.attempts) : `${o.attempts}/${o.maxAttempts}`,
          o.endedAt?.toISOString() ?? '-',
          visibleControls(skipText(o)),
          linkOf(occurrenceTraceId(name, o.window)) ?? occurrenceTraceId(name, o.window),
        ]),
      ),
    );
    return 0;
  });
}

/** The events a window's attempt ended with. */
const END_KINDS = new Set(['window-completed', 'window-failed', 'lease-lost']);
/** How many windows' outputs `history` reads (the newest). */
const HISTORY_OUTPUTS = 50;

/**
 * Each recorded output (--record-output) beside the event its attempt ended with, when that
 * event is among those shown: the latest such event of its window and generation.
 */
async function outputsOf(
  store: LeaseStore,
  job: string,
  events: HistoryEvent[],
): Promise<Map<HistoryEvent, WindowOutput>> {
  const found = new Map<HistoryEvent, WindowOutput>();
  if (!store.readOutputs) return found;
  const outputs = await store.readOutputs(job, HISTORY_OUTPUTS);
  if (outputs.length === 0) return found;
  const byAttempt = new Map(outputs.map((o) => [`${o.window}\u0000${o.generation}`, o]));
  const taken = new Set<string>();
  for (const e of [...events].reverse()) {
    if (!END_KINDS.has(e.kind) || e.window === null || e.generation === null) continue;
    const key = `${e.window}\u0000${e.generation}`;
    const o = byAttempt.get(key);
    if (o === undefined || taken.has(key)) continue;
    taken.add(key);
    found.set(e, o);
  }
  return new Map([...found].reverse());
}

/** Nagios-style: 0 healthy, 1 warning only, 2 at least one critical problem; errors exit 3 (cli.ts). */
export async function checkCommand(
  flags: DbFlags & { name?: string; all?: boolean; maxHold?: string; maxAttempts?: string; json?: boolean },
): Promise<number> {
  try {
    return await check(flags);
  } catch (err) {
    // A program reading `check --json` gets JSON whatever happened, saying why it has no
    // answer (the one-line message on stderr and the exit code stay as for every command).
    if (flags.json && err instanceof LeasejobError)
      out(
        JSON.stringify({ error: { code: err.code, exitCode: 3, message: maskPasswords(err.message) } }, null, 2) + '\n',
      );
    throw err;
  }
}

async function check(
  flags: DbFlags & { name?: string; all?: boolean; maxHold?: string; maxAttempts?: string; json?: boolean },
): Promise<number> {
  if (flags.name !== undefined && flags.all) throw new UsageError('Use either `--name` or `--all`, not both.');
  const name = flags.name !== undefined ? validateName(flags.name) : undefined;
  const maxHoldMs = flags.maxHold !== undefined ? parseDuration(flags.maxHold, '--max-hold') : undefined;
  // 1: a crontab job gets one attempt per occurrence, so its first failure is the one to see.
  const maxAttempts = flags.maxAttempts === undefined ? 1 : Number(flags.maxAttempts);
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1)
    throw new UsageError(
      `Expected \`--max-attempts\` to be a whole number of at least 1, got \`${flags.maxAttempts}\`.`,
    );
  return withStore({ ...flags, poolSize: JOB_STATES_POOL }, async (store, log) => {
    const { dbNow, jobs } = await readJobStates(store, name);
    const schema = await checkSchemaVersion(store, log);
    if (name !== undefined && jobs.length === 0) throw unknownJob(name, store.location);
    const problems = findProblems(jobs, dbNow, { maxHoldMs, maxAttempts });
    // Paused jobs are not problems (an operator said so), but a monitor should show them.
    const paused = jobs
      .filter((j) => j.paused && j.pause)
      .map((j) => ({
        job: j.name,
        reason: j.pause!.reason,
        since: j.pause!.since,
        until: j.pause!.until,
        by: j.pause!.by,
        version: j.version,
      }));
    // What a failover can lose (issue 22): a problem of the database, not of one job.
    const replication = await readReplicationSafely(store, log);
    if (replication)
      for (const p of replicationProblems(replication))
        problems.push({ job: DATABASE, severity: p.severity, kind: 'replication', message: p.message });
    if (flags.json)
      out(
        JSON.stringify(
          {
            dbNow,
            jobs: jobs.length,
            problems,
            paused,
            ...(schema ? { schemaVersion: schema.version, knownSchemaVersion: schema.known } : {}),
            ...(replication ? { replication } : {}),
          },
          null,
          2,
        ) + '\n',
      );
    else {
      if (problems.length === 0)
        out(`OK: ${jobs.length} job(s) healthy${paused.length ? `, ${paused.length} paused` : ''}\n`);
      else for (const p of problems) out(`${p.severity.toUpperCase()} ${p.job}: ${p.kind}: ${p.message}\n`);
      // Said, never counted as a problem: the server hides it from this role.
      for (const u of replication?.unchecked ?? []) out(`UNCHECKED ${DATABASE}: replication: ${u}\n`);
    }
    if (problems.some((p) => p.severity === 'critical')) return 2;
    return problems.length ? 1 : 0;
  });
}

/** The name problems of the database itself are reported under. */
const DATABASE = '(database)';

/** The replication report, or undefined (logged) when even that could not be read: check goes on. */
async function readReplicationSafely(store: LeaseStore, log: Logger): Promise<ReplicationReport | undefined> {
  try {
    return await store.readReplication?.();
  } catch (err) {
    log.warn({ err: maskPasswords((err as Error).message) }, 'could not read the replication setup');
    return undefined;
  }
}

const LISTEN_ERRORS: Record<string, string> = {
  EADDRINUSE: 'the port is in use',
  EACCES: 'not allowed for this user',
  EADDRNOTAVAIL: 'no such address on this host',
  ENOTFOUND: 'no such host name',
  EINVAL: 'not an address to listen on (a link-local IPv6 address needs its %interface)',
};

const EXPORTER_READ_TIMEOUT_MS = 4_000;
/**
 * Connections the kernel holds for the exporter before it accepts them (Linux caps it at
 * net.core.somaxconn, 4096 by default). Node's default, 511, overflows under a burst of scrapes:
 * the connections beyond it wait for the kernel's SYN-ACK retransmits (1 s, then 2 s, ...), a
 * legitimate scrape among them too (issue 44).
 */
const EXPORTER_BACKLOG = 4_096;

export async function exporterCommand(
  flags: DbFlags & { port?: string; host?: string; statusPage?: boolean; traceLinkTemplate?: string },
): Promise<number> {
  useTraceLinks(traceLinkTemplate(flags.traceLinkTemplate));
  const port = flags.port === undefined ? 9464 : Number(flags.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new UsageError(`Expected \`--port\` to be a TCP port from 0 to 65535, got \`${flags.port}\`.`);
  const host = flags.host ?? '0.0.0.0';
  // Reads bounded well inside Prometheus's default 10 s scrape timeout: a silent connection
  // then shows as leasejob_up 0, not as a failed scrape.
  return withStore({ ...flags, poolSize: 4, readTimeoutMs: EXPORTER_READ_TIMEOUT_MS }, async (store, log) => {
    const { Exporter } = await import('../../monitor/exporter.js');
    const exporter = new Exporter(store, log);
    const server = exporter.createServer({ statusPage: flags.statusPage !== false });
    await new Promise<void>((resolve, reject) =>
      server.once('error', reject).listen({ port, host, backlog: EXPORTER_BACKLOG }, () => resolve()),
    ).catch((err: unknown) => {
      // The address asked for cannot be had here: the operator's --port/--host, so exit 64.
      const code = String((err as { code?: unknown }).code ?? '');
      const why = LISTEN_ERRORS[code];
      if (why)
        throw new UsageError(
          `cannot listen on ${host} port ${port}: ${why} (${code}); choose another with --port or --host.`,
          { cause: err },
        );
      // Anything else (a name server that did not answer, EAI_AGAIN) is about the listening
      // address too, never the database: said as such, exit 69 (try again later).
      throw new LeasejobError(
        `cannot listen on ${host} port ${port}: ${code || (err as Error).message}`,
        'E_LISTEN',
        ExitCode.unavailable,
        { cause: err },
      );
    });
    const address = server.address();
    log.info(
      {
        host,
        port: typeof address === 'object' && address ? address.port : port,
        store: store.kind,
        location: store.location,
      },
      'exporter listening',
    );
    // Serve until SIGTERM/SIGINT, then finish in-flight scrapes and close.
    await new Promise<void>((resolve) => {
      const stop = (): void => {
        process.off('SIGTERM', stop);
        process.off('SIGINT', stop);
        server.close(() => resolve());
        server.closeIdleConnections?.();
      };
      process.on('SIGTERM', stop);
      process.on('SIGINT', stop);
    });
    log.info('exporter stopped');
    // Stopped before any scrape, it compiled only its start: its code cache is not the whole path.
    noteReach(exporter.scrapesServed > 0 ? Reach.whole : Reach.none);
    return 0;
  });
}
