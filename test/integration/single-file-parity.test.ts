// Issue 21: the single file is the product. Everything the npm build shows, the single file
// shows with the same bytes: every command's output with non-ASCII text (a job name, a pause
// reason, a child's recorded output), the exporter's status page, a job's page and /metrics,
// and the page as chromium renders it. Its loader once read the bundle as latin1, so the page's
// `·` came out as `Â·`; node:sqlite's BLOBs came out as lists of numbers.
//
// Same state, same clock: the embedded store, read by both builds with the wall clock frozen
// at one instant (libfaketime; the monotonic clock left true, so timers run), so that "3m ago"
// and the store's time are the same for both. PostgreSQL's own clock cannot be frozen, so
// against it only what holds no "now" is compared (history).
import { copyFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, logLines, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { faketimeLibrary } from '../helpers/faketime.mjs';
import { singleFile } from '../helpers/single-file.js';
import { tempDir } from '../helpers/temp.js';

const built = singleFile();
const FAKETIME_LIB = faketimeLibrary();
const CHROMIUM = process.env.LEASEJOB_CHROMIUM ?? '/usr/bin/chromium';
const skip = built.unbuilt ?? (FAKETIME_LIB ? undefined : 'needs libfaketime (Debian package faketime)');
if (skip) console.info(`single-file parity tests skipped: ${skip}`);

// Job names are validated for length and control characters only: any other text is a name.
const NAME = 'café · nightly ×2';
const REASON = 'maintenance — Grüße, back → soon';
const OUTPUT = 'naïve → done ✓ 日本語\n';

const tmp = tempDir('leasejob-parity-');
const STATE = path.join(tmp, 'state.db');
/** One instant, a minute after the state was made: both builds read the store at it. */
let frozen: Record<string, string>;

type Build = 'npm' | 'single file';
const BUILDS: Build[] = ['npm', 'single file'];
const argv0 = (b: Build): [string, string[]] => (b === 'npm' ? [process.execPath, [BIN]] : [built.file!, []]);

/** `leasejob <args>` of build `b`, with exactly the same environment for both. */
function cli(b: Build, args: string[], env: Record<string, string> = {}) {
  const [file, pre] = argv0(b);
  return execa(file, [...pre, ...args], {
    cwd: tmp,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: tmp,
      LANG: 'C.UTF-8',
      LEASEJOB_LOG_LEVEL: 'silent',
      ...env,
    },
    extendEnv: false,
    reject: false,
    stripFinalNewline: false,
    timeout: 60_000,
  });
}

/** What a command showed: its exit code and every byte of stdout and stderr. */
async function shown(b: Build, args: string[], env: Record<string, string> = {}) {
  const r = await cli(b, args, env);
  return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
}

async function startExporter(b: Build) {
  const [file, pre] = argv0(b);
  const p = execa(
    file,
    [...pre, 'exporter', '--state-file', STATE, '--port', '0', '--host', '127.0.0.1', '--log-level', 'info'],
    {
      cwd: tmp,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: tmp, ...frozen },
      extendEnv: false,
      reject: false,
    },
  );
  let err = '';
  p.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const port = await waitFor(`the ${b} exporter to listen`, () => {
    const line = logLines(err).find((l) => l.msg === 'exporter listening');
    return line ? Number(line.port) : undefined;
  });
  return { port, stop: () => (p.kill('SIGTERM'), p) };
}

let db: TestDb;
const exporters = new Map<Build, Awaited<ReturnType<typeof startExporter>>>();

describe.skipIf(skip !== undefined)('the single file shows what the npm build shows, byte for byte', () => {
  beforeAll(async () => {
    db = await testDb();
    const state = ['--state-file', STATE];
    // A failed run with recorded non-ASCII output, then a pause with a non-ASCII reason.
    const run = await shown('npm', ['run', ...state, '--name', NAME, '--schedule', '0 3 * * *',
      '--window-from-schedule', '--record-output', '4KiB', '--', 'sh', '-c', `printf '${OUTPUT}'; exit 3`]); // prettier-ignore
    expect(run.exitCode, run.stderr).toBe(3);
    const pause = await shown('npm', ['pause', ...state, '--name', NAME, '--reason', REASON]);
    expect(pause.exitCode, pause.stderr).toBe(0);
    const at = new Date(Date.now() + 60_000).toISOString().slice(0, 19).replace('T', ' ');
    frozen = {
      TZ: 'UTC',
      LD_PRELOAD: FAKETIME_LIB!,
      FAKETIME: at, // absolute: the wall clock stands still at this instant
      FAKETIME_NO_CACHE: '1',
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
    };
  });
  afterAll(async () => {
    for (const e of exporters.values()) await e.stop();
    await db?.close();
  });

  it('every reading command, with non-ASCII names, reasons and output, on the embedded store', async () => {
    const state = ['--state-file', STATE];
    const commands = [
      ['status', ...state],
      ['status', ...state, '--json'],
      ['history', ...state, '--name', NAME],
      ['history', ...state, '--name', NAME, '--json'],
      ['check', ...state],
      ['check', ...state, '--json'],
      ['check', ...state, '--name', NAME],
    ];
    for (const args of commands) {
      const [npm, single] = await Promise.all(BUILDS.map((b) => shown(b, args, frozen)));
      expect(single, args.join(' ')).toEqual(npm);
    }
    const history = await shown('single file', ['history', ...state, '--name', NAME], frozen);
    expect(history.stdout).toContain(OUTPUT);
    expect(history.stdout).toContain(REASON);
  });

  it('every writing command, each build on its own copy of the same state', async () => {
    const commands = [
      ['pause', '--name', NAME, '--reason', `${REASON} (again)`],
      ['resume', '--name', NAME],
      ['mark', '--name', NAME, '--window', '2020-01-01T03:00:00Z', '--skipped', '--reason', REASON],
      ['run', '--name', NAME, '--window', 'fenêtre-ü', '--', 'sh', '-c', `printf '${OUTPUT}'; exit 4`],
      ['release', '--name', NAME],
      ['history', '--name', NAME, '--limit', '3'],
    ];
    const copies = BUILDS.map((b) => {
      const copy = path.join(tmp, `${b.replace(' ', '-')}.db`);
      copyFileSync(STATE, copy);
      return copy;
    });
    for (const args of commands) {
      const [npm, single] = await Promise.all(
        BUILDS.map((b, i) => shown(b, [args[0]!, '--state-file', copies[i]!, ...args.slice(1)], frozen)),
      );
      // Each run is its own process: its owner (host:pid:nonce) and the child's measured duration differ.
      const steady = (r: typeof npm) => ({
        ...r,
        stdout: r.stdout
          .replaceAll(copies[0]!, 'STATE')
          .replaceAll(copies[1]!, 'STATE')
          .replace(/\b\S+:\d+:[0-9a-f]{8}\b/g, 'OWNER')
          .replace(/"duration_ms":\d+/g, '"duration_ms":N'),
      });
      expect(steady(single!), args.join(' ')).toEqual(steady(npm!));
    }
  });

  it('PostgreSQL: history of a job with non-ASCII output and reasons', async () => {
    const conn = ['--database-url', db.url, '--schema', db.schema];
    const run = await shown('single file', ['run', ...conn, '--name', NAME, '--window', 'w-ü', '--record-output',
      '4KiB', '--', 'sh', '-c', `printf '${OUTPUT}'; exit 5`]); // prettier-ignore
    expect(run.exitCode, run.stderr).toBe(5);
    expect(run.stdout).toBe(OUTPUT);
    expect((await shown('npm', ['pause', ...conn, '--name', NAME, '--reason', REASON])).exitCode).toBe(0);
    for (const args of [
      ['history', ...conn, '--name', NAME],
      ['history', ...conn, '--name', NAME, '--json'],
    ]) {
      const [npm, single] = await Promise.all(BUILDS.map((b) => shown(b, args)));
      expect(single, args.join(' ')).toEqual(npm);
      expect(single.stdout).toContain(REASON);
    }
  });

  it('the exporter: the status page, a job page and /metrics are the same bytes', async () => {
    for (const b of BUILDS) exporters.set(b, await startExporter(b));
    const paths = [
      '/',
      `/job?name=${encodeURIComponent(NAME)}`,
      `/?q=${encodeURIComponent('café')}`,
      '/metrics',
      '/healthz',
    ];
    for (const p of paths) {
      const [npm, single] = await Promise.all(
        BUILDS.map(async (b) => {
          const res = await fetch(`http://127.0.0.1:${exporters.get(b)!.port}${p}`);
          const body = Buffer.from(await res.arrayBuffer());
          return { status: res.status, type: res.headers.get('content-type'), body };
        }),
      );
      // The one measured figure: how long this scrape took, which no two processes share.
      const steady = (body: Buffer) =>
        p === '/metrics'
          ? body.toString('utf8').replace(/^leasejob_scrape_duration_seconds .*$/m, '')
          : body.toString('hex');
      expect({ ...single, body: steady(single!.body) }, p).toEqual({ ...npm, body: steady(npm!.body) });
      expect(single!.status, p).toBe(200);
    }
    const page = await (await fetch(`http://127.0.0.1:${exporters.get('single file')!.port}/`)).text();
    expect(page).toContain(NAME);
    expect(page).toContain(' · ');
    expect(page).not.toMatch(/Â|â€|â†/);
  });

  it.skipIf(!existsSync(CHROMIUM))('the single file’s status page in chromium reads as the npm build’s', async () => {
    if (exporters.size === 0) for (const b of BUILDS) exporters.set(b, await startExporter(b));
    const browser: Browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
    });
    try {
      const texts = new Map<Build, string[]>();
      for (const b of BUILDS) {
        const page = await browser.newPage();
        const base = `http://127.0.0.1:${exporters.get(b)!.port}`;
        await page.goto(`${base}/`);
        const list = await page.locator('body').innerText();
        await page.getByRole('link', { name: NAME, exact: true }).click();
        await page.waitForURL(/\/job\?name=/);
        texts.set(b, [list, await page.locator('h1').innerText(), await page.locator('body').innerText()]);
        await page.close();
      }
      const [list, title, job] = texts.get('single file')!;
      expect(title).toBe(NAME);
      expect(list).toMatch(/ · /);
      expect(job).toContain(REASON);
      expect(`${list}${job}`).not.toMatch(/Â|â€|â†/);
      expect(texts.get('single file')).toEqual(texts.get('npm'));
    } finally {
      await browser.close();
    }
  });
});
