// The README's crontab line under Debian's real `cron` on two "hosts" (two cron daemons, each
// in its own mount, PID and UTS namespace with its own /etc/cron.d and host name) against one
// PostgreSQL, MAILTO set and a `sendmail` that keeps each mail: a job that succeeds, one whose
// failed try another host's retry completes (--max-attempts 2), one retried in its own run
// (--retries 1) and one that fails mail 0, 0, 0 and 1 times, the one in words, not JSON.
// Needs root (namespaces, bind mounts) and cron; skipped otherwise, saying why. Cron fires on
// the minute: the crontab names one minute, so each line fires once, within about 80 s.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';

const isRoot = process.getuid?.() === 0;
const hasCron = existsSync('/usr/sbin/cron') && spawnSync('unshare', ['--version']).status === 0;
const skip = !isRoot
  ? 'it needs root (mount, PID and UTS namespaces for two cron daemons)'
  : !hasCron
    ? 'Debian cron (/usr/sbin/cron) or unshare is missing: apt-get install cron'
    : undefined;
if (skip) console.info(`cron mail test skipped: ${skip}`);

const HOSTS = ['host-a', 'host-b'] as const;
const JOBS = ['ok', 'retried-by-other-host', 'retried-in-run', 'fails'] as const;

/**
 * Inside the namespaces: this host's crontab, an empty /etc/crontab and user crontabs, a
 * private /run (cron's pid file), the stand-in over sendmail (or over /usr/sbin/sendmail made
 * to exist, where no MTA is installed), the host name; then cron in the foreground.
 */
const NAMESPACE_SCRIPT = `set -eu
dir=$1 host=$2
mount --bind "$dir/$host/cron.d" /etc/cron.d
mount --bind "$dir/empty" /var/spool/cron/crontabs 2>/dev/null || true
mount --bind "$dir/crontab" /etc/crontab
mount -t tmpfs tmpfs /run
if [ -e /usr/sbin/sendmail ]; then
  mount --bind "$dir/$host/sendmail" "$(readlink -f /usr/sbin/sendmail)"
else
  mkdir -p "$dir/sbin" && mount --bind /usr/sbin "$dir/sbin"
  mount -t tmpfs tmpfs /usr/sbin
  for f in "$dir"/sbin/*; do ln -s "$f" "/usr/sbin/\${f##*/}"; done
  cp "$dir/$host/sendmail" /usr/sbin/sendmail
fi
hostname "$host"
exec /usr/sbin/cron -f -L 0
`;

/** The processes whose parent is `pid` (from /proc), to know when cron's job processes are gone. */
function childrenOf(pid: number): number[] {
  const kids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) kids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return kids;
}

describe.skipIf(skip !== undefined)('cron mails a failure once, in words, and nothing else (two hosts)', () => {
  const dir = tempDir('leasejob-cron-mail-');
  let db: TestDb;
  const daemons: ChildProcess[] = [];
  let daemonErrors = '';

  beforeAll(async () => {
    db = await testDb();
  });
  afterAll(async () => {
    for (const d of daemons) d.kill('SIGKILL'); // unshare --kill-child takes cron and its jobs with it
    await db?.close();
  });

  it('0 mails for a success and for a failed try that a retry completes, 1 for a failure', async () => {
    // A minute at least 30 s away, so that both daemons are up before it starts.
    const at = new Date(Date.now() + 90_000);
    at.setUTCSeconds(0, 0);
    const minute = at.getUTCMinutes();
    const schedule = `${minute} * * * *`;
    const failOnce = path.join(dir, 'fail-once.sh');
    // The first start of a job fails, every later one succeeds (mkdir is atomic across hosts).
    writeFileSync(failOnce, '#!/bin/sh\nmkdir "$1" 2>/dev/null && exit 3\nexit 0\n');
    chmodSync(failOnce, 0o755);
    const commands: Record<(typeof JOBS)[number], string> = {
      ok: '-- true',
      'retried-by-other-host': `--max-attempts 2 --on-busy wait --wait-timeout 2m -- ${failOnce} ${dir}/marker-other`,
      'retried-in-run': `--retries 1 --retry-delay 1s -- ${failOnce} ${dir}/marker-run`,
      fails: '-- false',
    };
    mkdirSync(path.join(dir, 'empty'));
    mkdirSync(path.join(dir, 'done'));
    writeFileSync(path.join(dir, 'crontab'), '');
    writeFileSync(path.join(dir, 'ns.sh'), NAMESPACE_SCRIPT);
    for (const host of HOSTS) {
      mkdirSync(path.join(dir, host, 'cron.d'), { recursive: true });
      mkdirSync(path.join(dir, host, 'mail'));
      writeFileSync(
        path.join(dir, host, 'sendmail'),
        `#!/bin/sh\ncat > "$(mktemp ${path.join(dir, host, 'mail')}/mail.XXXXXX)"\n`,
        { mode: 0o755 },
      );
      // The README's line, each job's --name and flags its own; `touch` says the line has run.
      const lines = JOBS.map(
        (job) =>
          `${schedule} root ${process.execPath} ${BIN} run --log-level warn --log-format pretty ` +
          `--schema ${db.schema} --name ${job} --schedule '${schedule}' --window-from-schedule ` +
          `${commands[job]}; touch ${dir}/done/${host}-${job}`,
      );
      const crontab = path.join(dir, host, 'cron.d', 'leasejob');
      writeFileSync(crontab, ['MAILTO=ops@example.com', `LEASEJOB_DATABASE_URL=${db.url}`, ...lines, ''].join('\n'));
      chmodSync(crontab, 0o644);
      const d = spawn(
        'unshare',
        ['--mount', '--pid', '--uts', '--fork', '--kill-child', 'sh', path.join(dir, 'ns.sh'), dir, host],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      d.stderr!.on('data', (chunk: Buffer) => (daemonErrors += chunk.toString()));
      daemons.push(d);
    }
    const expected = JOBS.length * HOSTS.length;
    const why = (): string => `cron's stderr: ${daemonErrors || '(nothing)'}`;
    const doneCount = (): number => readdirSync(path.join(dir, 'done')).length;
    await waitFor(
      `every line of both crontabs to run at ${at.toISOString()}`,
      () => doneCount() === expected || daemons.some((d) => d.exitCode !== null),
      200_000,
      500,
    );
    expect(doneCount(), why()).toBe(expected);
    // cron mails after the line has ended, from its own child process: once no daemon has one, every mail is written.
    const crons = daemons.map((d) => childrenOf(d.pid!)[0]!);
    await waitFor('cron to have sent its mails', () => crons.every((c) => childrenOf(c).length === 0), 60_000, 200);

    const mails = HOSTS.flatMap((host) =>
      readdirSync(path.join(dir, host, 'mail')).map((f) => ({
        host,
        text: readFileSync(path.join(dir, host, 'mail', f), 'utf8'),
      })),
    );
    const about = (job: string) => mails.filter((m) => new RegExp(`(--name |job=)${job} `).test(m.text));
    const counts = Object.fromEntries(JOBS.map((job) => [job, about(job).length]));
    expect(counts, mails.map((m) => m.text).join('\n-----\n')).toEqual({
      ok: 0,
      'retried-by-other-host': 0,
      'retried-in-run': 0,
      fails: 1,
    });
    // The one mail, to MAILTO, in words: a warning line with the exit code, no JSON.
    const body = about('fails')[0]!.text.split('\n\n').slice(1).join('\n\n');
    expect(about('fails')[0]!.text).toMatch(/^To: ops@example.com$/m);
    expect(body).toMatch(/^\d\d:\d\d:\d\d WARN {2}window failed: once per occurrence.* job=fails .*exitCode=1/m);
    expect(body).not.toMatch(/^\{/m);
    // The retries did happen: two attempts each, the occurrence completed.
    const rows = await db.rows<{ job: string; attempts: number; outcome: string }>(
      `SELECT job, attempts, outcome FROM ${db.schema}.windows ORDER BY job`,
    );
    expect(rows).toEqual([
      { job: 'fails', attempts: 1, outcome: 'failed' },
      { job: 'ok', attempts: 1, outcome: 'completed' },
      { job: 'retried-by-other-host', attempts: 2, outcome: 'completed' },
      { job: 'retried-in-run', attempts: 2, outcome: 'completed' },
    ]);
  }, 330_000);
});
