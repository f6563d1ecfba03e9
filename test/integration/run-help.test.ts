// `leasejob run --help` in commander's help groups, the options people need first: the job and
// its occurrence, then where its state is kept; every option listed once.
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';

describe('run --help', () => {
  it('groups the options under headings, the job and its store first, each option once', async () => {
    const r = await runCli(['run', '--help']);
    expect(r.exitCode, r.all).toBe(0);
    const headings = r.stdout.split('\n').filter((l) => /^\S.*:$/.test(l) && l !== 'Example:');
    expect(headings).toEqual([
      'Arguments:',
      'The job and its occurrence:',
      'Where its state is kept, and its logs:',
      'When it fails:',
      'Monitoring and notifications:',
      'Another run, late runs, missed occurrences:',
      'The lease:',
      'The child:',
      'Options:',
    ]);
    const first = r.stdout.slice(r.stdout.indexOf('The job and its occurrence:'), r.stdout.indexOf('Where its state'));
    for (const flag of ['--name', '--schedule', '--tz', '--window-from-schedule']) expect(first).toContain(flag);
    const flags = [...r.stdout.matchAll(/^ {2}(--[a-z-]+)/gm)].map((m) => m[1]);
    expect(new Set(flags).size).toBe(flags.length);
    expect(flags).toEqual(expect.arrayContaining(['--ttl', '--on-busy', '--catch-up', '--user', '--record-output']));
  });
});
