// The operator writes: `leasejob pause`, `resume`, `mark` and `release`, each a compare-and-set
// on the job's version (seed 003: versions, not last-write-wins).
import { hostname, userInfo } from 'node:os';
import { DateTime } from 'luxon';
import { parseDuration, parseIsoOffset } from '../../schedule/duration.js';
import { ConflictError, LeaseUnavailableError, UsageError } from '../../errors.js';
import { validateName, validateWindowKey } from '../../names.js';
import { windowKey } from '../../schedule/occurrence.js';
import { parseSchedule, nextTick } from '../../schedule/cron.js';
import type { JobRow, LeaseStore, OperatorResult } from '../../store/contract.js';
import { unknownJob, withStore, type DbFlags } from '../with-store.js';

interface OperatorFlags extends DbFlags {
  name?: string;
  expectVersion?: string;
  json?: boolean;
}

/** Operator writes are administrative: as `release`, the schema owner's (runner roles may not write the tables). */
const PERMISSION_HINT =
  "pause, resume, mark and release change the job outside the runners' rules, so run them as the " +
  'schema owner (the role that ran `leasejob migrate`), not a runner role';

const MAX_REASON_LENGTH = 500;
/** A pause longer than this is a typo (and past what a timestamp comparison should hold). */
const MAX_PAUSE_MS = 366 * 86_400_000;

/** Who writes: user@host, as the pause's `by` and the events' owner. */
export function operatorId(): string {
  let user: string;
  try {
    user = userInfo().username;
  } catch {
    user = process.env.USER ?? process.env.LOGNAME ?? 'unknown';
  }
  return `${user}@${hostname()}`;
}

function parseExpectVersion(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (!/^\d{1,15}$/.test(text))
    throw new UsageError(
      `Expected \`--expect-version\` to be a whole number (the job's version, as \`leasejob status ` +
        `--json\` shows it), got ${JSON.stringify(text)}.`,
    );
  return Number(text);
}

function parseReason(text: string | undefined): string | undefined {
  if (text === undefined) return undefined;
  // eslint-disable-next-line no-control-regex
  if (text.trim() === '' || text.length > MAX_REASON_LENGTH || /[\u0000-\u001f\u007f]/.test(text)) {
    throw new UsageError(
      `Expected \`--reason\` to be one line of text of 1 to ${MAX_REASON_LENGTH} characters, got ` +
        `${text.length > 40 ? `${text.length} characters` : JSON.stringify(text)}.`,
    );
  }
  return text;
}

/** `--until`: an ISO-8601 instant with its offset, or a duration from now on the store's clock. */
export function parseUntil(text: string | undefined, hostNow = new Date()): { until?: Date; untilMs?: number } {
  if (text === undefined) return {};
  if (/^\d{4}-\d{2}-\d{2}T/.test(text)) {
    const at = DateTime.fromISO(text, { setZone: true });
    if (!at.isValid || !/(Z|[+-]\d{2}(:?\d{2})?)$/i.test(text)) {
      throw new UsageError(
        `Expected \`--until\` to be an ISO-8601 instant with its offset (2026-12-24T08:00:00Z, ` +
          `2026-12-24T06:00:00-03:00) or a duration (2h, 1d), got ${JSON.stringify(text)}.`,
      );
    }
    // The database clock decides (the store refuses an end already past on it); a host clock
    // far behind is caught here first, so nothing is written for an obvious mistake.
    if (at.toMillis() <= hostNow.getTime())
      throw new UsageError(`\`--until\` ${text} is in the past; give a later instant or a duration (2h, 1d).`);
    return { until: at.toJSDate() };
  }
  let ms: number;
  try {
    ms = parseDuration(text, '--until');
  } catch (err) {
    // A duration out of range (0s, 400d) is told as such; anything else was not a duration.
    if (err instanceof UsageError && /positive|at most/.test(err.message)) throw err;
    throw new UsageError(
      `Expected \`--until\` to be an ISO-8601 instant with its offset (2026-12-24T08:00:00Z) or a ` +
        `duration (2h, 1d), got ${JSON.stringify(text)}.`,
    );
  }
  if (!(ms > 0) || ms > MAX_PAUSE_MS)
    throw new UsageError(`Expected \`--until\` as a duration to be from 1ms to 366d, got ${JSON.stringify(text)}.`);
  return { untilMs: ms };
}

/** The job as stored (exit 64 when there is none), and the version the write compares with. */
async function readJob(
  store: LeaseStore,
  name: string,
  expect: number | undefined,
): Promise<{ job: JobRow; version: number }> {
  const { rows } = await store.readJobRows(name);
  const job = rows[0];
  if (!job) throw unknownJob(name, store.location);
  return { job, version: expect ?? job.version };
}

/** The job's record as an operator needs it to decide again (after a conflict, in --json). */
function describe(j: JobRow): string {
  const pause =
    j.paused && j.pause
      ? `paused since ${j.pause.since.toISOString()} by ${j.pause.by ?? 'unknown'}` +
        `${j.pause.until ? ` until ${j.pause.until.toISOString()}` : ''}${j.pause.reason ? ` (${j.pause.reason})` : ''}`
      : 'not paused';
  const lease = j.held ? `held by ${j.owner} (generation ${j.generation})` : 'lease not held';
  return `version ${j.version}, ${pause}, ${lease}`;
}

async function conflict(store: LeaseStore, name: string, read: number, r: OperatorResult): Promise<ConflictError> {
  const { rows } = await store.readJobRows(name);
  const now = rows[0] ? describe(rows[0]) : `version ${r.version}`;
  return new ConflictError(
    `job "${name}" changed since version ${read} was read; nothing written. It is now at ${now}. ` +
      `Look again (\`leasejob status --name ${name}\`, \`leasejob history --name ${name}\`) and ` +
      `retry, with \`--expect-version ${r.version}\` to write over exactly that.`,
  );
}

const out = (text: string): void => {
  process.stdout.write(text);
};

/** The write's answer on stdout: one line, or JSON. */
function report(flags: OperatorFlags, r: OperatorResult, line: string): void {
  if (flags.json) out(JSON.stringify({ ...r, message: line }, null, 2) + '\n');
  else out(line + '\n');
}

export async function pauseCommand(flags: OperatorFlags & { reason?: string; until?: string }): Promise<number> {
  const name = validateName(flags.name);
  const expect = parseExpectVersion(flags.expectVersion);
  const reason = parseReason(flags.reason);
  const until = parseUntil(flags.until);
  return withStore(
    flags,
    async (store) => {
      const { version } = await readJob(store, name, expect);
      const r = await store.pause({
        job: name,
        expectVersion: version,
        reason,
        ...until,
        by: operatorId(),
        hostTime: new Date(),
      });
      if (r.status === 'unknown') throw unknownJob(name, store.location);
      if (r.status === 'conflict') throw await conflict(store, name, version, r);
      if (r.status === 'bad-until')
        throw new UsageError(
          `\`--until\` ${flags.until} is not after the store's clock (${r.dbNow.toISOString()}); nothing ` +
            `written. Give a later instant or a duration.`,
        );
      report(
        flags,
        r,
        `paused ${name}: version ${r.version}, event ` +
          `${r.seq}${r.pausedUntil ? `, until ${r.pausedUntil.toISOString()}` : ', until resumed'}` +
          '. A run already holding the lease goes on (`leasejob release` stops it).',
      );
      return 0;
    },
    { permissionHint: PERMISSION_HINT },
  );
}

export async function resumeCommand(flags: OperatorFlags): Promise<number> {
  const name = validateName(flags.name);
  const expect = parseExpectVersion(flags.expectVersion);
  return withStore(
    flags,
    async (store) => {
      const { version } = await readJob(store, name, expect);
      const r = await store.resume({ job: name, expectVersion: version, by: operatorId(), hostTime: new Date() });
      if (r.status === 'unknown') throw unknownJob(name, store.location);
      if (r.status === 'conflict') throw await conflict(store, name, version, r);
      if (r.status === 'noop') report(flags, r, `${name} is not paused: nothing to resume (version ${r.version})`);
      else report(flags, r, `resumed ${name}: version ${r.version}, event ${r.seq}`);
      return 0;
    },
    { permissionHint: PERMISSION_HINT },
  );
}

/**
 * A schedule-derived job's window must be one of its schedule's: the key of the first tick at
 * or after the start the key names (shifted back by the job's --window-offset). A key whose
 * format luxon cannot read back is accepted as it is.
 */
export function scheduleWindowProblem(
  job: Pick<JobRow, 'schedule' | 'tz' | 'windowMode' | 'windowFormat' | 'windowOffset'>,
  window: string,
): string | undefined {
  if (job.windowMode !== 'schedule' || job.schedule === null) return undefined;
  const tz = job.tz ?? 'UTC';
  let schedule;
  try {
    schedule = parseSchedule(job.schedule, tz);
  } catch {
    return undefined;
  }
  const format = job.windowFormat ?? undefined;
  const offset = job.windowOffset ? parseIsoOffset(job.windowOffset, '--window-offset') : undefined;
  const read = (key: string): DateTime =>
    format === undefined
      ? DateTime.fromISO(key, { setZone: true })
      : DateTime.fromFormat(key, format, { zone: tz, locale: 'en-US' });
  const sample = windowKey(nextTick(schedule, new Date()), { format, offset });
  // Some formats do not read back (week numbers, ordinals luxon cannot parse): not judged.
  if (!read(sample).isValid) return undefined;
  const parsed = read(window);
  const expected = `a window of its schedule (\`${job.schedule}\`${job.tz ? ` in ${job.tz}` : ''}, keys like ${sample})`;
  if (!parsed.isValid) return `job's windows are ${expected}`;
  const start = offset ? parsed.setZone(tz).minus(offset) : parsed.setZone(tz);
  const tick = nextTick(schedule, new Date(start.toMillis() - 1));
  const key = windowKey(tick, { format, offset });
  if (key === window) return undefined;
  return `job's windows are ${expected}; the nearest is ${key}`;
}

export async function markCommand(
  flags: OperatorFlags & { window?: string; done?: boolean; skipped?: boolean; reason?: string },
): Promise<number> {
  const name = validateName(flags.name);
  const expect = parseExpectVersion(flags.expectVersion);
  if (flags.window === undefined)
    throw new UsageError('`leasejob mark` needs `--window <key>`: the window handled by hand.');
  const window = validateWindowKey(flags.window);
  if (!!flags.done === !!flags.skipped)
    throw new UsageError(
      'Give exactly one of `--done` (the work was done by hand) and `--skipped` (it is not to be done).',
    );
  const outcome = flags.done ? 'completed' : 'skipped';
  const reason = parseReason(flags.reason);
  return withStore(
    flags,
    async (store) => {
      const { job, version } = await readJob(store, name, expect);
      const problem = scheduleWindowProblem(job, window);
      if (problem)
        throw new UsageError(
          `window ${JSON.stringify(window)} is not one of job "${name}"'s: the ${problem}. Nothing written.`,
        );
      const r = await store.mark({
        job: name,
        window,
        outcome,
        reason,
        expectVersion: version,
        by: operatorId(),
        hostTime: new Date(),
      });
      if (r.status === 'unknown') throw unknownJob(name, store.location);
      if (r.status === 'conflict') throw await conflict(store, name, version, r);
      if (r.status === 'busy') {
        throw new LeaseUnavailableError(
          `window ${window} of job "${name}" is being run by a live owner (${r.holder}, generation ` +
            `${r.holderGeneration}); nothing written. ` +
            'Wait for it to finish, or stop it first with `leasejob release --force`.',
          'E_LEASE_BUSY',
        );
      }
      report(
        flags,
        r,
        `marked ${name} window ${window} ${outcome === 'completed' ? 'done' : 'skipped'}: version ${r.version}, event ${r.seq}` +
          `${r.previousOutcome ? ` (was ${r.previousOutcome})` : ''}; runs skip it from now on`,
      );
      return 0;
    },
    { permissionHint: PERMISSION_HINT },
  );
}

/** What --force does to a live holder (said when refusing, and when forced). */
const FORCE_CONSEQUENCE =
  "its child is stopped at the owner's next renewal (within a third of its TTL), its outcome is " +
  'not recorded (that runner exits 75), and its window stays open, so the next run does it again';

export async function releaseCommand(flags: OperatorFlags & { force?: boolean }): Promise<number> {
  const name = validateName(flags.name);
  const expect = parseExpectVersion(flags.expectVersion);
  return withStore(
    flags,
    async (store, log) => {
      const { version } = await readJob(store, name, expect);
      const r = await store.releaseLease({
        job: name,
        expectVersion: version,
        force: !!flags.force,
        by: operatorId(),
        hostTime: new Date(),
      });
      if (r.status === 'unknown') throw unknownJob(name, store.location);
      if (r.status === 'conflict') throw await conflict(store, name, version, r);
      if (r.status === 'busy') {
        throw new LeaseUnavailableError(
          `job "${name}" is held by a live owner (${r.holder}, generation ` +
            `${r.holderGeneration}${r.holderWindow ? `, window ${r.holderWindow}` : ''}) that still renews; ` +
            `nothing released. ` +
            `With --force, ${FORCE_CONSEQUENCE}.`,
          'E_LEASE_BUSY',
        );
      }
      if (r.status === 'noop') {
        report(flags, r, `${name}: lease not held, nothing to release (version ${r.version})`);
        return 0;
      }
      if (r.live)
        log.warn(
          { job: name, owner: r.holder, generation: r.holderGeneration },
          `live holder released with --force: ${FORCE_CONSEQUENCE}`,
        );
      log.info({ job: name, owner: r.holder, generation: r.holderGeneration }, 'lease released');
      report(
        flags,
        r,
        `released ${name} (owner ${r.holder}, generation ` +
          `${r.holderGeneration}${r.live ? ', live: forced' : ', stale'}): version ${r.version}, event ` +
          `${r.seq}`,
      );
      return 0;
    },
    {
      permissionHint:
        "release ends a lease outside the runners' rules, so run it as the schema owner (the role that " +
        'ran `leasejob migrate`), not a runner role',
    },
  );
}
