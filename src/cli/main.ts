// CLI wiring: commander definitions, and the only place that turns errors into exit codes.
import { Command, CommanderError, Option } from 'commander';
import { COMMANDS } from '../startup/command-names.js';
import { maskPasswords } from '../secrets.js';
import { DEFAULTS } from '../defaults.js';
import { ExitCode, LeasejobError, UsageError } from '../errors.js';
import { LOG_LEVELS } from './log-level.js';
import { LOG_FORMATS } from './log-format.js';
import { packageVersion } from '../package-root.js';
import { Reach, noteReach } from '../startup/start-reach.js';

export { reach } from '../startup/start-reach.js';
export { watchOutput, exitWhenWritten } from './process-exit.js';

/** The commands, as buildProgram defines them. */
export { COMMANDS as COMMAND_NAMES } from '../startup/command-names.js';

function dbOptions(cmd: Command): Command {
  return cmd
    .option(
      '--database-url <url>',
      'PostgreSQL URL (else LEASEJOB_DATABASE_URL, DATABASE_URL, or PGHOST/PGUSER/...); without any, the embedded one-host store',
    )
    .option(
      '--database-url-file <path>',
      'read the PostgreSQL URL from this file instead (else LEASEJOB_DATABASE_URL_FILE): kept out of ps and /proc',
    )
    .option('--schema <name>', `PostgreSQL schema holding leasejob tables (default: "${DEFAULTS.schema}")`)
    .option(
      '--state-file <path>',
      'embedded store file (else LEASEJOB_STATE_FILE, $XDG_STATE_HOME/leasejob/leasejob.db, ~/.local/state/leasejob/leasejob.db)',
    )
    .option(
      '--require-shared',
      'refuse to run without a shared PostgreSQL (or LEASEJOB_REQUIRE_SHARED=1; implied inside Kubernetes)',
    )
    .addOption(
      new Option('--log-level <level>', 'log level (logs on stderr; default info, or LEASEJOB_LOG_LEVEL)').choices(
        LOG_LEVELS,
      ),
    )
    .addOption(
      new Option(
        '--log-format <format>',
        'logs as JSON lines or as lines for a person (default auto: pretty when stderr is a terminal, else json; ' +
          'or LEASEJOB_LOG_FORMAT)',
      ).choices(LOG_FORMATS),
    );
}

/**
 * What a run tells about each window it runs: the same flags, words and rules for `run` (one
 * window, or a catch-up's several) and `backfill` (docs/notifications.md).
 */
function reportOptions(cmd: Command): Command {
  return cmd
    .option(
      '--ping-url <url>',
      "healthchecks.io-style ping URL: /start as each window's child starts, the URL on success, " +
        '/<exit status> on failure or a lost lease (or LEASEJOB_PING_URL; a secret, never logged)',
    )
    .option(
      '--notify-url <url>',
      'webhook: a JSON POST for a failed window, a lost lease and missed occurrences (or LEASEJOB_NOTIFY_URL; a secret, never logged)',
    )
    .option(
      '--trace-link-template <url>',
      "a trace viewer's URL with {traceId} in it (or LEASEJOB_TRACE_LINK_TEMPLATE): the webhook's trace_url",
    )
    .option(
      '--record-output [size]',
      "keep the last bytes of the child's stdout and stderr with each window (default 4KiB when " +
        'given, at most 64KiB): shown by history, sent with pings and the webhook; may hold secrets the ' +
        'child prints',
    );
}

type CommandFn = (flags: Record<string, unknown>) => Promise<number>;

/** Resolves after one turn of the event loop (its I/O callbacks included). */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A command's action, its module loaded only when it runs (import paths stay literal for the bundler). */
const lazy =
  (load: () => Promise<CommandFn>) =>
  async (flags: Record<string, unknown>): Promise<void> => {
    exitWith(await (await load())(flags));
  };

/** `run`'s occurrence policies (src/cli/policies.ts): the attempt budget, retries, backoff. */
function policyOptions(cmd: Command): Command {
  return cmd
    .option(
      '--max-attempts <n>',
      'attempts an occurrence may have in all, across triggers and hosts (1-1000); then it is exhausted and later ' +
        'triggers skip it (exit 0) until --rerun or `leasejob mark`. Default: from a crontab or --scheduled-time, once ' +
        'per occurrence (one failed attempt, or --retries + 1; a crashed one is resumed); else no limit',
    )
    .option(
      '--retries <n>',
      'after a failed try, try again this many times inside this run, under the same lease (0-100; default 0), ' +
        'each an attempt of its own',
    )
    .option(
      '--retry-delay <duration>',
      'backoff base: retry k waits between half and all of delay*2^(k-1), at most 16 delays (default with ' +
        '--retries: 10s); given, a trigger within the backoff of the last failure skips (exit 0)',
    );
}

const ON_BUSY_HELP =
  'when a live owner holds the lease; replace: stop a holder that runs an *earlier* occurrence ' +
  '(never the same window), then take the lease';
const WAIT_TIMEOUT_HELP = 'with --on-busy wait or replace: give up (exit 75) after this long (replace: default 3 TTLs)';

/** What run gives the child: the database URL or not, and as which user. */
function childUserOptions(cmd: Command): Command {
  return cmd
    .option(
      '--pass-database-url',
      'give the child DATABASE_URL (when a URL configured the store; PG* variables pass anyway) and PGPASSWORD (not passed by default)',
    )
    .option(
      '--user <name|uid>',
      "start the child as this user (needs root; as setpriv and runuser do): it cannot read leasejob's memory, environment or files",
    )
    .option('--group <name|gid>', "with --user: the child's group (default: the user's own)");
}

/** `run`'s occurrence: the schedule, and the window the ledger keys it by (or none, on purpose). */
function windowOptions(cmd: Command): Command {
  return cmd
    .option('--schedule <cron>', "5-field cron or @hourly/@daily/...: the job's schedule")
    .option('--tz <zone>', 'IANA time zone of the schedule', DEFAULTS.tz)
    .option(
      '--window-from-schedule',
      'derive the window from the scheduled occurrence (JOB_NAME, --scheduled-time, or the latest tick)',
    )
    .option('--window <key>', 'use this literal window key')
    .option(
      '--mutex-only',
      'no window, on purpose: only one run at a time, every trigger runs the command (silences the warning ' +
        '--schedule without a window gives)',
    )
    .option(
      '--scheduled-time <iso>',
      'the occurrence this run is for, ISO-8601 with offset (a tick of --schedule, if given)',
    )
    .option(
      '--window-format <luxon>',
      'format the occurrence as the window key (luxon tokens with every field from the year down, e.g. yyyy-MM-dd)',
    )
    .option(
      '--window-offset <duration>',
      'shift the occurrence before formatting, signed (e.g. -1d or -P1D to close yesterday)',
    );
}

/**
 * `run --help` in groups, the options people need first (commander's help groups): each option
 * to the heading that names it, and the options listed in that order.
 */
const RUN_HELP_GROUPS: Array<[string, string[]]> = [
  [
    'The job and its occurrence:',
    [
      '--name',
      '--schedule',
      '--tz',
      '--window-from-schedule',
      '--window',
      '--scheduled-time',
      '--window-format',
      '--window-offset',
      '--mutex-only',
    ],
  ],
  [
    'Where its state is kept, and its logs:',
    [
      '--database-url',
      '--database-url-file',
      '--schema',
      '--state-file',
      '--require-shared',
      '--log-level',
      '--log-format',
    ],
  ],
  ['When it fails:', ['--retries', '--retry-delay', '--max-attempts', '--max-runtime', '--rerun']],
  [
    'Monitoring and notifications:',
    ['--expect-duration', '--alert-after', '--alert-lookback', '--ping-url', '--notify-url', '--record-output'],
  ],
  [
    'Another run, late runs, missed occurrences:',
    ['--on-busy', '--wait-timeout', '--max-delay', '--catch-up', '--catch-up-limit'],
  ],
  ['The lease:', ['--ttl', '--kill-grace']],
  ['The child:', ['--pass-database-url', '--user', '--group']],
];

/** Each option of `cmd` to its group's heading, the options reordered group by group (help lists them so). */
function inHelpGroups(cmd: Command, groups: Array<[string, string[]]>): Command {
  const rank = new Map<string, number>();
  groups.forEach(([heading, longs], g) =>
    longs.forEach((long, i) => {
      rank.set(long, g * 100 + i);
      cmd.options.find((o) => o.long === long)?.helpGroup(heading);
    }),
  );
  const at = (o: Option): number => rank.get(o.long ?? '') ?? Number.MAX_SAFE_INTEGER;
  (cmd.options as Option[]).sort((a, b) => at(a) - at(b));
  return cmd;
}

function defineRun(program: Command): void {
  const run = dbOptions(
    childUserOptions(
      reportOptions(
        policyOptions(
          windowOptions(
            program
              .command('run')
              .description(
                'acquire the lease, claim the window, run the command, renew while it runs, record the outcome',
              )
              .usage('--name <job> [options] -- <command> [args...]')
              // Required, but checked by the command (validateName): commander checks required options
              // before unknown ones, and would answer `--nmae x` with "--name not specified".
              .option('--name <job>', 'job name (required): the lease and the window ledger are keyed by it'),
          )
            .option('--ttl <duration>', 'lease time to live, 1.5s to 24h; renewed every TTL/3', DEFAULTS.ttl)
            .option(
              '--kill-grace <duration>',
              `SIGTERM-to-SIGKILL grace when the child must stop (default: ${DEFAULTS.killGrace}, or half of what a short --ttl leaves)`,
            )
            .addOption(
              new Option('--on-busy <policy>', ON_BUSY_HELP)
                .choices(['skip', 'wait', 'fail', 'replace'])
                .default(DEFAULTS.onBusy),
            )
            .option('--wait-timeout <duration>', WAIT_TIMEOUT_HELP)
            .option('--max-runtime <duration>', 'stop the child after this long (exit 124; at most 24 days)')
            .option('--max-delay <duration>', 'an occurrence older than this is recorded as missed and not run')
            .option(
              '--alert-after <duration>',
              'grace after a scheduled tick before `check` and the exporter call its window overdue ' +
                '(default: half the interval, at most 1h)',
            )
            .option(
              '--alert-lookback <duration>',
              'how far back `check`, `status` and the exporter report due occurrences that did not complete ' +
                '(default: the longer of 24h and 3 intervals; at most the newest 24 occurrences)',
            )
            .option(
              '--expect-duration <min>..<max>',
              'how long a run should take, e.g. 30s..10m (either side may be left out: 1m.., ..2h); a run ' +
                'outside it is a `check` warning, a metric and an alert; while it runs, a warning past its max ' +
                '(instead of past half the schedule interval)',
            )
            .option('--rerun', 'run an already completed window again'),
        ),
      )
        .option(
          '--catch-up <duration>',
          'first run the earlier occurrences of --schedule within this long before this one that never ' +
            'completed, oldest first, each its own window (needs --window-from-schedule)',
        )
        .option(
          '--catch-up-limit <n>',
          'with --catch-up: at most this many earlier windows per run (default 10); older ones beyond it are recorded as missed',
        ),
    )
      .argument('[command...]', 'the command to run, after --')
      .addHelpText(
        'after',
        `
Durations: 500ms, 90s, 2m, 1h30m, 1d or ISO-8601 (PT90S).
The child gets FENCE_TOKEN, IDEMPOTENCY_KEY, LEASEJOB_NAME, LEASEJOB_WINDOW, LEASEJOB_ATTEMPT,
LEASEJOB_SCHEDULED_AT, LEASEJOB_OWNER, LEASEJOB_SCHEMA, and LEASEJOB_REQUIRE_SHARED=1 when this
run uses PostgreSQL (a leasejob inside the child then refuses the one-host store); not the
database URL, unless --pass-database-url; TRACEPARENT, the occurrence's trace and this attempt's
span. OTEL_EXPORTER_OTLP_ENDPOINT (and OTEL_*): spans sent over OTLP/HTTP as the run ends.
Exit codes: 0 ok or nothing to do; the child's own code; 128+N leasejob told to stop by
signal N (whatever the child then did), or the child killed by signal N; 64 usage; 69 database
unreachable, refusing the statement (read-only standby, cancelled,
rolled back on every try) or schema not migrated, or the embedded store's file or SQLite
module unusable; 70 internal; 75 lease lost, acquired too
late to start safely, busy (--on-busy fail, wait timeout), or the occurrence not yet due by
the database clock; 124 --max-runtime exceeded; 126 the command is not executable, 127 not
found (as a shell). The window's recorded exit code is always the one leasejob exits with.
In a crontab, --log-level warn --log-format pretty: cron mails a failure once, in words,
and nothing for a success, a skip or a try that a retry then completes.

Example:
  leasejob run --name nightly-close --schedule '5 0 * * *' --tz America/Sao_Paulo \\
    --window-from-schedule --window-offset -P1D --window-format yyyy-MM-dd -- node close-day.js`,
      )
      .action(async (command: string[], flags: Record<string, unknown>, cmd: Command) => {
        requireDashDash(command, cmd);
        // Connect while the run path loads. Its modules initialize synchronously,
        // and a connection only moves on when the event loop turns, so the load is split
        // in two with a turn before each half: the socket connects and sends its startup
        // message while the server forks a backend; once the logger has loaded, the
        // server's password request is answered, and the server checks it while the rest
        // loads. Without the turns the whole handshake waited until everything had loaded
        // (strace); with them it is off the critical path (an A/B of alternated runs, see
        // docs/performance.md).
        const { openStoreEarly } = await import('../store/choice.js');
        const early = openStoreEarly(flags);
        if (early) {
          await early.store.then(nextTurn, nextTurn);
          await import('../log.js');
          await nextTurn();
        }
        const { runCommand } = await import('./commands/run.js');
        exitWith(await runCommand(flags, command, early));
      }),
  );
  inHelpGroups(run, RUN_HELP_GROUPS);
}

function defineBackfill(program: Command): void {
  dbOptions(
    reportOptions(
      program
        .command('backfill')
        .description(
          'run every occurrence of --schedule from --from to --to, in order, under one lease; completed windows are skipped',
        )
        .usage('--name <job> --schedule <cron> --from <iso> --to <iso> [options] -- <command> [args...]')
        .option('--name <job>', 'job name (required): the same as its `run`, so that the windows are the same')
        .option(
          '--schedule <cron>',
          "the job's schedule (required), with the same --tz, --window-format and --window-offset as its `run`",
        )
        .option('--tz <zone>', 'IANA time zone of the schedule', DEFAULTS.tz)
        .option('--window-format <luxon>', 'as `run`: format the occurrence as the window key')
        .option('--window-offset <iso-duration>', 'as `run`: shift the occurrence before formatting')
        .option('--from <iso>', 'the first occurrence time of the range, ISO-8601 with an offset (included)')
        .option('--to <iso>', 'the last occurrence time of the range (included), or `now`; never later than now')
        .option(
          '--dry-run',
          'list the windows of the range, their state and what a backfill would do; run and write nothing',
        )
        .option('--rerun', 'run completed windows again too')
        .option('--keep-going', 'after a failed window, go on with the next (default: stop; the rest stay open)')
        .option('--max-windows <n>', `refuse a range of more windows than this (default ${1000}, at most 100000)`)
        .option('--ttl <duration>', 'lease time to live, renewed every TTL/3', DEFAULTS.ttl)
        .option(
          '--kill-grace <duration>',
          `SIGTERM-to-SIGKILL grace when the child must stop (default: ${DEFAULTS.killGrace})`,
        )
        .addOption(
          new Option('--on-busy <policy>', 'when a live owner holds the lease (a scheduled run)')
            .choices(['skip', 'wait', 'fail'])
            .default('wait'),
        )
        .option('--wait-timeout <duration>', 'with --on-busy wait: give up (exit 75) after this long')
        .option('--max-runtime <duration>', "stop a window's child after this long (exit 124)")
        .option('--pass-database-url', 'as `run`: give the child DATABASE_URL and PGPASSWORD'),
    )
      .argument('[command...]', 'the command to run for each window, after -- (not needed with --dry-run)')
      .addHelpText(
        'after',
        `
Each window runs as \`run\` would run it: its own IDEMPOTENCY_KEY, LEASEJOB_WINDOW,
LEASEJOB_SCHEDULED_AT, LEASEJOB_ATTEMPT and TRACEPARENT (the occurrence's trace, as \`run\`),
one FENCE_TOKEN for the whole backfill. OTEL_* as \`run\`: spans exported when asked.
Run the same command again after a failure or a stop to resume: completed windows are skipped.
Progress: a line on a terminal, else one log line per window. SIGTERM stops the current child
(as \`run\`) and leaves the rest open.
Exit codes: 0 every window completed or nothing to do; the first failed child's code; 128+N
stopped by signal N; 64 usage (a range backwards, in the future, of no or too many windows);
69 database; 75 lease lost or busy (--on-busy fail, wait timeout); 124 --max-runtime.

Example:
  leasejob backfill --name nightly-close --schedule '5 0 * * *' --tz America/Sao_Paulo \\
    --window-offset -P1D --window-format yyyy-MM-dd --from 2026-11-01T00:05:00-03:00 --to now \\
    -- node close-day.js`,
      )
      .action(async (command: string[], flags: Record<string, unknown>, cmd: Command) => {
        requireDashDash(command, cmd);
        const { backfillCommand } = await import('./commands/backfill.js');
        exitWith(await backfillCommand(flags, command));
      }),
  );
}

function defineMigrate(program: Command): void {
  dbOptions(
    program
      .command('migrate')
      .description(
        'apply sql/ migrations and mend functions that differ from what they make (idempotent, safe to run concurrently)',
      )
      .option(
        '--grant-to <role>',
        "grant a runner role what run, status, history, check, the exporter and a child's assert_lease need, and nothing more (repeatable)",
        (v: string, prev: string[] = []) => [...prev, v],
      )
      .option(
        '--lock-timeout <duration>',
        'how long to wait for a table lock another transaction holds; runs queue behind the wait (default 5s)',
      ),
  ).action(lazy(async () => (await import('./commands/migrate.js')).migrateCommand));
}

function defineStatus(program: Command): void {
  dbOptions(
    program
      .command('status')
      .description('one line per job: holder, generation, expiry, last completed window, open windows, overdue')
      .option('--name <job>', 'only this job')
      .option(
        '--json',
        "JSON instead of a table, with each job's occurrences within its lookback counted by the reason each ended as",
      )
      .option(
        '--wide',
        "every column (generation, expiry, completion time) and every open window in full, whatever the terminal's width",
      )
      .addHelpText(
        'after',
        `
The table fits the terminal: COLUMNS, else the terminal's width (no limit into a pipe or a file);
lists are shortened to what fits, with a count of what was left out (+3 more).`,
      ),
  ).action(lazy(async () => (await import('./commands/status.js')).statusCommand));
}

function defineHistory(program: Command): void {
  dbOptions(
    program
      .command('history')
      .description("the job's events in sequence order (the latest --limit)")
      .option('--name <job>', 'job name (required)')
      .option('--limit <n>', 'how many of the latest events', '50')
      .option(
        '--window <key>',
        "only this occurrence's events: how it was claimed, tried, skipped (busy, exhausted, backoff, paused) and ended",
      )
      .option(
        '--by-occurrence',
        'one line per occurrence (the latest --limit, at most 1000) with the reason it ended as: completed, ' +
          'caught-up, backfilled, running, failed (attempts left), exhausted, skipped-{paused,marked,busy,' +
          'replaced,backoff}, missed-{max-delay,catch-up-limit,other}; and the runs that skipped it, per host',
      )
      .option('--json', 'JSON instead of a table')
      .option(
        '--trace-link-template <url>',
        "a trace viewer's URL with {traceId} in it (or LEASEJOB_TRACE_LINK_TEMPLATE): trace ids shown as links",
      ),
  ).action(lazy(async () => (await import('./commands/status.js')).historyCommand));
}

function defineCheck(program: Command): void {
  dbOptions(
    program
      .command('check')
      .description(
        'monitoring-plugin exit codes: 0 OK, 1 WARNING (a window failed, a run outside --expect-duration), ' +
          '2 CRITICAL (a due occurrence not completed, an owner stuck), 3 UNKNOWN (no answer: bad flags, database unreachable)',
      )
      .option('--name <job>', 'only this job')
      .option('--all', 'every registered job (the default)')
      .option('--max-hold <duration>', 'an owner holding one generation longer than this is stuck')
      .option(
        '--max-attempts <n>',
        'warn about an open window once it has failed this many attempts (default 1: from the first failure)',
      )
      .option('--json', 'JSON instead of one line per problem'),
  ).action(lazy(async () => (await import('./commands/status.js')).checkCommand));
}

function defineExporter(program: Command): void {
  dbOptions(
    program
      .command('exporter')
      .description(
        'serve Prometheus /metrics, /healthz and a read-only status page at /, computed from the database on each request',
      )
      .option('--port <port>', 'TCP port', '9464')
      .option('--host <address>', 'address to listen on', '0.0.0.0')
      .option(
        '--no-status-page',
        'serve only /metrics and /healthz: no job names, hosts or events at /, /job and /occurrence',
      )
      .option(
        '--trace-link-template <url>',
        "a trace viewer's URL with {traceId} in it (or LEASEJOB_TRACE_LINK_TEMPLATE): the status page links trace ids",
      ),
  ).action(lazy(async () => (await import('./commands/status.js')).exporterCommand));
}

function defineRelease(program: Command): void {
  dbOptions(
    expectVersion(
      program
        .command('release')
        .description('administratively release a lease now (the generation is kept); a live holder only with --force')
        .option('--name <job>', 'job name (required)')
        .option(
          '--force',
          'release a holder that still renews: its child is stopped at its next renewal, its outcome is ' +
            'not recorded (the runner exits 75) and the window is redone by the next run',
        ),
    ),
  )
    .addHelpText('after', operatorExits)
    .action(lazy(async () => (await import('./commands/operator.js')).releaseCommand));
}

function definePause(program: Command): void {
  dbOptions(
    expectVersion(
      program
        .command('pause')
        .description(
          'pause a job: its runs exit 0 without starting the command and record the occurrence as skipped (paused)',
        )
        .option('--name <job>', 'job name (required)')
        .option('--reason <text>', 'why, shown by status, check --json and the exporter')
        .option(
          '--until <iso|duration>',
          'end the pause by itself then, on the database clock: an ISO-8601 instant with offset, or a ' +
            'duration (2h, 1d); default: until resumed',
        ),
    ),
  )
    .addHelpText(
      'after',
      `
A pause does not stop a run already holding the lease: \`leasejob release --force\` does.
Pausing a paused job changes its reason and end (its start is kept).${operatorExits}`,
    )
    .action(lazy(async () => (await import('./commands/operator.js')).pauseCommand));
}

function defineResume(program: Command): void {
  dbOptions(
    expectVersion(
      program
        .command('resume')
        .description("end a job's pause now (a job not paused: nothing to do, exit 0)")
        .option('--name <job>', 'job name (required)'),
    ),
  )
    .addHelpText('after', operatorExits)
    .action(lazy(async () => (await import('./commands/operator.js')).resumeCommand));
}

function defineMark(program: Command): void {
  dbOptions(
    expectVersion(
      program
        .command('mark')
        .description('record a window handled by hand as final: later runs skip it, as a completed window')
        .option('--name <job>', 'job name (required)')
        .option('--window <key>', "the window key (for a --window-from-schedule job, one of its schedule's windows)")
        .option('--done', 'the work was done by hand (outcome completed)')
        .option('--skipped', 'the work is not to be done (outcome skipped)')
        .option('--reason <text>', 'why, recorded in the event'),
    ),
  )
    .addHelpText(
      'after',
      `
Refused (exit 75) while a live owner runs that window.${operatorExits}`,
    )
    .action(lazy(async () => (await import('./commands/operator.js')).markCommand));
}

function definePrune(program: Command): void {
  dbOptions(
    program
      .command('prune')
      .description(
        'retention: delete events and finished windows older than --older-than, in small batches (never ' +
          "leases, the registry, open windows or a job's latest completion)",
      )
      .option(
        '--older-than <duration>',
        'required: the horizon, e.g. 90d; at least the longest --max-delay of the jobs pruned',
      )
      .option('--name <job>', 'only this job')
      .option('--dry-run', 'count what would be deleted; write nothing')
      .option('--batch-size <n>', 'rows deleted per transaction (default 2000)')
      .option(
        '--vacuum',
        'embedded store: rewrite the state file once (VACUUM) so that later prunes give space back; holds runs meanwhile',
      )
      .addHelpText(
        'after',
        `
An occurrence scheduled before the horizon is recorded as missed and never run again: its
window may be gone. Event sequence numbers are never reused; \`history\` says how many were
pruned. Schedule it daily, e.g. in a crontab:
  17 3 * * *  leasejob prune --older-than 90d`,
      ),
  ).action(lazy(async () => (await import('./commands/prune.js')).pruneCommand));
}

/** The exit codes and compare-and-set rule every operator write shares, for its help. */
const operatorExits = `
Every operator write (pause, resume, mark, release) is a compare-and-set on the job's version
(\`leasejob status --json\` shows it): without --expect-version it compares with the version
it has just read, so two operators racing get one write and one conflict, never a silent
overwrite. Each write is an event in \`leasejob history\`. Run as the schema owner.
Exit codes: 0 written, or nothing to change; 64 usage (bad flag, unknown job, a window not of
the job's schedule, --until not in the future: nothing written); 65 conflict: the job changed
since it was read (its state is printed; nothing written); 69 database unreachable or refused;
75 a live owner holds the lease (release without --force; mark of the window it runs).`;
/** --expect-version and --json, the options every operator write shares. */
const expectVersion = (cmd: Command): Command =>
  cmd
    .option(
      '--expect-version <n>',
      'write only if the job is still at this version (else exit 65); default: the version just read',
    )
    .option('--json', 'the result as JSON on stdout');

/** Each command's definition, in the order --help lists them. */
const DEFINITIONS: Record<string, (program: Command) => void> = {
  run: defineRun,
  backfill: defineBackfill,
  migrate: defineMigrate,
  status: defineStatus,
  history: defineHistory,
  check: defineCheck,
  exporter: defineExporter,
  release: defineRelease,
  pause: definePause,
  resume: defineResume,
  mark: defineMark,
  prune: definePrune,
};

/**
 * The program, with every command, or with `only` that one: a start defines just the command it
 * runs (each definition builds its options and help text, work a run of another command does
 * not need). `leasejob --help`, an unknown command and `help` get all of them.
 */
export function buildProgram(only?: string, argv: string[] = []): Command {
  const program = new Command('leasejob')
    .description('Run a scheduled command once per scheduled occurrence, guarded by a PostgreSQL lease.')
    .version(packageVersion(), '-V, --version')
    // One line per error, in the same shape as our own: "leasejob: <what>; see --help".
    // Commander puts its suggestion for a near miss on a line of its own: joined into the one.
    .configureOutput({
      outputError: (str, write) => write(`leasejob: ${commanderMessage(str, dashDashHint(argv))}\n`),
    });

  for (const [name, define] of Object.entries(DEFINITIONS)) if (only === undefined || only === name) define(program);

  // cron-parser builds luxon dates without a locale, so luxon asks Intl for the system's, and
  // that loads ICU's data (a noticeable part of a start) even for a UTC schedule. Nothing the CLI prints
  // depends on luxon's default locale (window keys set en-US themselves, instants are ISO), so
  // the CLI process fixes it; the library leaves an embedding program's luxon alone.
  program.hook('preAction', async () => {
    (await import('luxon')).Settings.defaultLocale = 'en-US';
  });

  program.addHelpText(
    'after',
    `
Environment: LEASEJOB_DATABASE_URL (else DATABASE_URL, PG*), LEASEJOB_STATE_FILE,
LEASEJOB_REQUIRE_SHARED=1, LEASEJOB_LOG_LEVEL, LEASEJOB_COMPILE_CACHE=<dir>|off (V8 code
cache of the CLI; default: a directory of this user under the OS temp dir); for run and
backfill, OTEL_EXPORTER_OTLP_ENDPOINT and the other OTEL_* variables (spans over OTLP/HTTP).
Run \`leasejob <command> --help\` for options.`,
  );
  return program;
}

let pendingExit = ExitCode.ok as number;
function exitWith(code: number): void {
  pendingExit = code;
}

/**
 * One line in the shape of our own errors, from one of commander's: "<what>; see --help".
 * Commander puts its suggestion for a near miss on a line of its own: joined into the one.
 */
function commanderMessage(str: string, unknownOptionHint = ''): string {
  const text = maskPasswords(str)
    .replace(/^error: /, '')
    .trim()
    .replace(/\s*\n\s*/g, ' ')
    .replace('(Did you mean', '(did you mean')
    .replace(/\.$/, '');
  return `${text}${text.startsWith('unknown option') ? unknownOptionHint : ''}; see --help`;
}

/**
 * `run --name x echo -n hi`: without `--`, the command's own options reach commander as
 * leasejob's, and "unknown option '-n'" alone does not say what to do.
 */
function dashDashHint(argv: string[]): string {
  if ((argv[2] !== 'run' && argv[2] !== 'backfill') || argv.includes('--')) return '';
  return `: if it is the command's, put the command after \`--\` (leasejob ${argv[2]} --name <job> [options] -- <command> [args...])`;
}

/** Parse argv, run the command, and return the exit code (bin/leasejob.js exits with it). */
export async function main(argv: string[]): Promise<number> {
  const code = await mainCode(argv);
  // `check` is a monitoring plugin: 0 OK, 1 WARNING, 2 CRITICAL, and 3 UNKNOWN for every way of
  // having no answer (bad flags, no database, an internal error), as Nagios and Icinga read it.
  return argv[2] === 'check' && code > 2 ? CHECK_UNKNOWN : code;
}

/** `check`'s exit code when it has no answer (the monitoring-plugin UNKNOWN). */
export const CHECK_UNKNOWN = 3;

async function mainCode(argv: string[]): Promise<number> {
  const program = buildProgram(COMMANDS.has(argv[2] ?? '') ? argv[2] : undefined, argv);
  program.exitOverride();
  for (const c of program.commands) c.exitOverride();
  try {
    await program.parseAsync(argv);
    return pendingExit;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version are not errors; everything else commander rejects is usage. Either
      // way the command did not run: its code cache holds only the parsing.
      noteReach(Reach.none);
      if (err.exitCode === 0) return 0;
      // A program reading `check --json` gets JSON whatever happened (src/cli/commands/status.ts).
      const dashes = argv.indexOf('--');
      if (argv[2] === 'check' && argv.slice(3, dashes === -1 ? undefined : dashes).includes('--json')) {
        process.stdout.write(
          JSON.stringify(
            { error: { code: 'E_USAGE', exitCode: CHECK_UNKNOWN, message: commanderMessage(err.message) } },
            null,
            2,
          ) + '\n',
        );
      }
      return ExitCode.usage;
    }
    if (err instanceof LeasejobError) {
      process.stderr.write(`leasejob: ${maskPasswords(err.message)}\n`);
      return err.exitCode;
    }
    process.stderr.write(
      `leasejob: internal error: ${maskPasswords(err instanceof Error ? (err.stack ?? err.message) : String(err))}\n`,
    );
    return ExitCode.internal;
  }
}

/**
 * The command must follow `--`: without it, commander reads the command's own options as
 * leasejob's (`leasejob run --name a printenv X --name b` would run job b).
 */
function requireDashDash(command: string[], cmd: Command): void {
  if (command.length === 0) return;
  // commander keeps the argv it parsed on the program, untyped.
  const raw = ((cmd.parent ?? cmd) as unknown as { rawArgs: string[] }).rawArgs;
  const dashes = raw.indexOf('--');
  const after = dashes === -1 ? [] : raw.slice(dashes + 1);
  if (after.length === command.length && after.every((a, i) => a === command[i])) return;
  const before = dashes === -1 ? command : command.slice(0, command.length - after.length);
  throw new UsageError(
    `Expected the command after \`--\` (leasejob run --name <job> [options] -- <command> ` +
      `[args...]), got \`${before.join(' ')}\` before it: ` +
      "without `--` the command's own options would be read as leasejob's.",
  );
}
