// run --user and --group: the user (and group) the child runs as, looked up in /etc/passwd and
// /etc/group, so that it cannot read leasejob's memory, environment or files. Needs root.
import { readFileSync } from 'node:fs';
import { UsageError } from '../errors.js';
import type { RunAs } from '../lease/child.js';

interface Entry {
  name: string;
  id: number;
  gid: number;
  home: string;
}

function readTable(file: string): string[][] {
  try {
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter((line) => line !== '' && !line.startsWith('#'))
      .map((line) => line.split(':'));
  } catch {
    return [];
  }
}

/** A name or a number, looked up in `file` (passwd: name, uid, gid, home; group: name, gid). */
function lookUp(kind: 'user' | 'group', value: string): Entry | undefined {
  const rows = readTable(kind === 'user' ? '/etc/passwd' : '/etc/group');
  const byId = /^\d+$/.test(value);
  const row = rows.find((r) => (byId ? r[2] === value : r[0] === value));
  if (row)
    return { name: row[0]!, id: Number(row[2]), gid: Number(kind === 'user' ? row[3] : row[2]), home: row[5] ?? '/' };
  // A number with no entry stands for itself (a container's arbitrary uid), as setpriv takes it.
  if (byId) return { name: '', id: Number(value), gid: Number(value), home: '/' };
  return undefined;
}

/** The child's user and group from --user and --group; undefined when neither is given. */
export function resolveRunAs(user: string | undefined, group: string | undefined): RunAs | undefined {
  if (user === undefined && group === undefined) return undefined;
  if (user === undefined) throw new UsageError('Expected `--group` with `--user` (the user the child runs as).');
  if (process.geteuid?.() !== 0)
    throw new UsageError(
      `\`--user ${user}\` needs leasejob to run as root (it starts the child as that user, as setpriv and runuser do); ` +
        'run leasejob as root, or leave --user out and run leasejob itself as that user.',
    );
  const u = lookUp('user', user);
  if (u === undefined)
    throw new UsageError(
      `Expected \`--user\` to be a user name or uid, got ${JSON.stringify(user)} (not in /etc/passwd).`,
    );
  let gid = u.gid;
  if (group !== undefined) {
    const g = lookUp('group', group);
    if (g === undefined)
      throw new UsageError(
        `Expected \`--group\` to be a group name or gid, got ${JSON.stringify(group)} (not in /etc/group).`,
      );
    gid = g.id;
  }
  return { uid: u.id, gid, ...(u.name ? { name: u.name, home: u.home } : {}) };
}
