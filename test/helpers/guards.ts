// The two guards every guard test runs against: the native one (src/native/guard.c, built by
// `npm run build` where a compiler is, dist/guard/linux-<arch>/) and the Node one (dist/guard.cjs,
// chosen with LEASEJOB_NATIVE_GUARD=off), and a guard started directly to speak its protocol.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { ROOT, waitFor } from './wait.js';
import type { CliEnv } from './cli.js';

export const NATIVE_GUARD = path.join(ROOT, 'dist', 'guard', `linux-${process.arch}`, 'leasejob-guard');

export interface GuardUnderTest {
  name: 'native' | 'node';
  /** What `leasejob run` needs in its environment to use this guard. */
  env: CliEnv;
  file: string;
  args: string[];
  /** Why its tests skip here, if they do. */
  missing: string | undefined;
}

export const GUARDS: GuardUnderTest[] = [
  {
    name: 'native',
    env: {},
    file: NATIVE_GUARD,
    args: [],
    missing: existsSync(NATIVE_GUARD) ? undefined : `${NATIVE_GUARD} was not built (no musl-gcc: Debian's musl-tools)`,
  },
  {
    name: 'node',
    env: { LEASEJOB_NATIVE_GUARD: 'off' },
    file: process.execPath,
    args: [path.join(ROOT, 'dist', 'guard.cjs')],
    missing: undefined,
  },
];

export interface DirectGuard {
  proc: ChildProcess;
  /** Lines the guard said so far. */
  lines: string[];
  /** What the child wrote to stdout (the guard's stdout, inherited). */
  stdout(): Buffer;
  say(text: string): void;
  /** Closes leasejob's end, as a leasejob gone would. */
  hangUp(): void;
  waitLine(pred: (line: string) => boolean, what: string): Promise<string>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** The guard started as leasejob starts it: its own session, its control socket on fd 3. */
export function startGuard(g: GuardUnderTest): DirectGuard {
  const proc = spawn(g.file, g.args, { stdio: ['ignore', 'pipe', 'inherit', 'pipe'], detached: true, env: {} });
  const control = proc.stdio[3] as unknown as Readable & Writable;
  control.on('error', () => {}); // the guard may be gone before our last word (EPIPE)
  const lines: string[] = [];
  let buffered = '';
  control.setEncoding('latin1');
  control.on('data', (chunk: string) => {
    buffered += chunk;
    for (let i = buffered.indexOf('\n'); i >= 0; i = buffered.indexOf('\n')) {
      lines.push(buffered.slice(0, i));
      buffered = buffered.slice(i + 1);
    }
  });
  const out: Buffer[] = [];
  proc.stdout!.on('data', (b: Buffer) => out.push(b));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('close', (code, signal) => resolve({ code, signal })),
  );
  return {
    proc,
    lines,
    stdout: () => Buffer.concat(out),
    say: (text) => {
      if (control.writable) control.write(text);
    },
    hangUp: () => control.end(),
    waitLine: (pred, what) => waitFor(what, () => lines.find(pred), 20_000),
    exited,
  };
}

/** The monotonic clock's now in ms, as leasejob says a stop point (process.hrtime: CLOCK_MONOTONIC). */
export function monoNowMs(): number {
  const [s, ns] = process.hrtime();
  return s * 1e3 + ns / 1e6;
}
