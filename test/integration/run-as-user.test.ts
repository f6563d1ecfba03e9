// run --user and --group (issue 20): the child starts as another user (with that user's
// supplementary groups, as runuser gives them), so it cannot read leasejob's /proc environ;
// without root, or with an unknown user, exit 64 and nothing runs. Needs root (skipped otherwise).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, runCli } from '../helpers/cli.js';
import { NO_DB_ENV } from '../helpers/both-stores.js';
import { tempDir } from '../helpers/temp.js';

const isRoot = process.geteuid?.() === 0;
const canAddUsers = isRoot && existsSync('/usr/sbin/useradd') && existsSync('/usr/sbin/groupadd');
if (!isRoot) console.info('run --user tests skipped: they need root (the child is started as another user)');

const tmp = tempDir('leasejob-run-as-');
const state = path.join(tmp, 'state.db');
/** A user of this test's own with a supplementary group, made with useradd (removed after). */
const NAME = `ljt${process.pid}`;

/** A child that says who it is and whether it can read leasejob's environ (pid in LEASEJOB_OWNER). */
const whoAmI = [
  'sh',
  '-c',
  'pid=$(echo "$LEASEJOB_OWNER" | cut -d: -f2); ' +
    'if cat /proc/$pid/environ >/dev/null 2>&1; then r=readable; else r=denied; fi; ' +
    'echo "$(id -u) $(id -g) [$(id -G)] $USER $r"',
];

describe.runIf(isRoot)('run --user', () => {
  let supplementaryGid: number | undefined;
  beforeAll(() => {
    if (!canAddUsers) return;
    spawnSync('/usr/sbin/groupadd', [`${NAME}g`]);
    spawnSync('/usr/sbin/useradd', ['-M', '-N', '-G', `${NAME}g`, '-s', '/bin/sh', NAME]);
    const g = spawnSync('getent', ['group', `${NAME}g`], { encoding: 'utf8' }).stdout.split(':')[2];
    supplementaryGid = g ? Number(g) : undefined;
  });
  afterAll(() => {
    if (!canAddUsers) return;
    spawnSync('/usr/sbin/userdel', [NAME]);
    spawnSync('/usr/sbin/groupdel', [`${NAME}g`]);
  });

  it('starts the child as that user and group: it cannot read leasejob’s environ', async () => {
    const r = await runCli(
      ['run', '--state-file', state, '--name', 'as-nobody', '--user', '65534', '--group', '65534', '--', ...whoAmI],
      NO_DB_ENV,
    );
    expect(r.exitCode, r.all).toBe(0);
    expect(r.stdout.trim()).toMatch(/^65534 65534 \[65534\] .* denied$/);
  });

  it.runIf(canAddUsers)(
    'by name: with the user’s supplementary groups, USER and HOME set as runuser sets them',
    async () => {
      const r = await runCli(
        ['run', '--state-file', state, '--name', 'as-named', '--user', NAME, '--', ...whoAmI],
        NO_DB_ENV,
      );
      expect(r.exitCode, r.all).toBe(0);
      const [, , , groups, user, readable] = /^(\d+) (\d+) \[([\d ]+)\] (\S+) (\S+)$/.exec(r.stdout.trim()) ?? [];
      expect(groups?.split(' ').map(Number), r.stdout).toContain(supplementaryGid);
      expect(user).toBe(NAME);
      expect(readable).toBe('denied');
    },
  );

  it('an unknown user, --group alone, or leasejob not root: exit 64, nothing runs', async (ctx) => {
    const marker = path.join(tmp, 'ran');
    const child = ['sh', '-c', `echo ran > '${marker}'`];
    const unknown = await runCli(
      ['run', '--state-file', state, '--name', 'as-x', '--user', 'no-such-user-here', '--', ...child],
      NO_DB_ENV,
    );
    expect(unknown.exitCode, unknown.all).toBe(64);
    expect(unknown.stderr).toContain('Expected `--user` to be a user name or uid');
    const groupAlone = await runCli(
      ['run', '--state-file', state, '--name', 'as-x', '--group', '0', '--', ...child],
      NO_DB_ENV,
    );
    expect(groupAlone.exitCode, groupAlone.all).toBe(64);
    // leasejob itself as nobody: --user needs root.
    // The checkout must be readable by uid 65534 (a clone under a 0700 directory is not).
    const reach = spawnSync('setpriv', ['--reuid', '65534', '--regid', '65534', '--clear-groups', 'test', '-r', BIN]);
    if (reach.status !== 0) {
      console.info(`run --user: the not-root case skipped: uid 65534 cannot read ${BIN}`);
      ctx.skip();
    }
    const asNobody = spawnSync(
      'setpriv',
      [
        '--reuid',
        '65534',
        '--regid',
        '65534',
        '--clear-groups',
        process.execPath,
        BIN,
        'run',
        '--state-file',
        path.join(tmp, 'n.db'),
        '--name',
        'as-x',
        '--user',
        '0',
        '--',
        ...child,
      ],
      { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: tmp } },
    );
    expect(asNobody.status, asNobody.stderr).toBe(64);
    expect(asNobody.stderr).toContain('needs leasejob to run as root');
    expect(existsSync(marker)).toBe(false);
  });
});
