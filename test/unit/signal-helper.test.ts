// The suite once killed itself: a harness read a fixture's pid file between its creation and its
// write, got '' (Number('') is 0), and kill(0, SIGKILL) took the whole run's process group. These
// tests hold the three defences: pid files are written atomically, read only when whole, and a
// signal to pid <= 1 or to the test's own process or group is refused.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readPidFile, signalGroup, signalPid, writeFileAtomic } from '../helpers/signal.mjs';
import { fixture } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-signal-'));
const ownGroup = (): number => {
  const text = readFileSync('/proc/self/stat', 'utf8');
  return Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[2]);
};
const started: number[] = [];
afterAll(() => {
  for (const pid of started) signalPid(pid, 'SIGKILL');
});

describe('readPidFile', () => {
  it.each([
    ['missing', undefined, undefined],
    ['empty (created, not yet written)', '', undefined],
    ['zero', '0', undefined],
    ['init', '1', undefined],
    ['not a number', 'abc', undefined],
    ['a pid', '4242', 4242],
    ['a pid and a newline', '4242\n', 4242],
    ['a pid, then what the fixture appended', '4242\nSIGTERM\n', 4242],
  ])('%s', (name, text, pid) => {
    const file = path.join(dir, `${name.replace(/\W+/g, '-')}.pid`);
    if (text !== undefined) writeFileSync(file, text);
    expect(readPidFile(file)).toBe(pid);
  });
});

describe('signalPid and signalGroup refuse what would reach the test run itself', () => {
  it.each([0, 1, -1, Number.NaN, 1.5])('pid %s', (pid) => {
    expect(() => signalPid(pid, 'SIGKILL')).toThrow(/refusing/);
    expect(() => signalGroup(pid, 'SIGKILL')).toThrow(/refusing/);
  });
  it("the test's own process and group", () => {
    expect(() => signalPid(process.pid, 'SIGKILL')).toThrow(/own process or group/);
    expect(() => signalGroup(ownGroup(), 'SIGKILL')).toThrow(/own process or group/);
  });
  it('a process that has exited: false, no throw', async () => {
    const child = spawn(process.execPath, ['-e', '0']);
    await new Promise((resolve) => child.once('exit', resolve));
    // Reaped by the exit handler: the pid names nothing now (or, rarely, a new process: not ours to kill).
    expect(typeof signalPid(child.pid!, 0)).toBe('boolean');
  });
  it('a live process in its own group: signalled', async () => {
    const child = spawn(process.execPath, [fixture('forever.mjs')], { detached: true, stdio: 'ignore' });
    started.push(child.pid!);
    const gone = new Promise((resolve) => child.once('exit', (_code, sig) => resolve(sig)));
    expect(signalGroup(child.pid!, 'SIGKILL')).toBe(true);
    expect(await gone).toBe('SIGKILL');
  });
});

describe('fixtures write their pid files atomically', () => {
  it('a reader polling append-env.mjs block= sees nothing or the whole pid, never a partial file', async () => {
    for (let i = 0; i < 5; i++) {
      const out = path.join(dir, `block-${i}.jsonl`);
      const child = spawn(process.execPath, [fixture('append-env.mjs'), out, 'block=w'], {
        env: { ...process.env, LEASEJOB_WINDOW: 'w' },
        stdio: 'ignore',
      });
      started.push(child.pid!);
      const seen = new Set<string>();
      const until = Date.now() + 60_000;
      while (Date.now() < until) {
        if (existsSync(`${out}.blocked`)) {
          const text = readFileSync(`${out}.blocked`, 'utf8');
          seen.add(text);
          if (text !== '') break;
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
      expect([...seen]).toEqual([String(child.pid)]);
      signalPid(child.pid!, 'SIGKILL');
    }
  });
  it('writeFileAtomic replaces a file whole', () => {
    const file = path.join(dir, 'atomic.pid');
    writeFileAtomic(file, '123');
    writeFileAtomic(file, '4567');
    expect(readFileSync(file, 'utf8')).toBe('4567');
  });
});
