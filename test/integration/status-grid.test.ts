// The status page's occurrence grid in a real browser (Debian's chromium driven by playwright-core):
// one hourly job whose occurrences real CLI runs put in every state (completed, failed, retrying,
// exhausted, overdue, missed, skipped, paused, replaced, running); each cell's state as set up and
// as `check --json` reports it; the job page's duration chart; an occurrence's page with its
// attempts and trace id; the reader's zone; a phone's width; and no CSP violation.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, fixture, runCli, startCli, startExporter, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';
import { occurrenceTraceId } from '../../src/trace-context.js';

const CHROMIUM = process.env.LEASEJOB_CHROMIUM ?? '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
/** Screenshots for a person to look at; .tmp/ is gitignored. */
const SHOTS = process.env.LEASEJOB_SCREENSHOT_DIR ?? path.join(ROOT, '.tmp', 'screenshots');

const JOB = 'grid-states';
// Hourly, from a fixed top of the hour: an hour passing mid-test makes one more occurrence due
// (a new overdue cell at the end), which the assertions allow for.
const HOUR_BASE = Math.floor(Date.now() / 3_600_000) * 3_600_000;
const hoursAgo = (n: number): string => new Date(HOUR_BASE - n * 3_600_000).toISOString().replace('.000Z', 'Z');
/** The window key of the occurrence n hours ago, as --window-from-schedule names it. */
const keyOf = (n: number): string => hoursAgo(n);

/** What each occurrence was made into, by hours ago. */
const EXPECTED: Record<number, string> = {
  10: 'failed',
  9: 'completed',
  8: 'retrying',
  7: 'exhausted',
  6: 'overdue',
  5: 'skipped',
  4: 'missed',
  3: 'replaced',
  2: 'completed',
  1: 'paused',
  0: 'running',
};

const tmp = tempDir('leasejob-grid-');
let db: TestDb;
let exporter: { port: number; stop: () => Promise<unknown> } | undefined;
let running: ReturnType<typeof startCli> | undefined;
const release = path.join(tmp, 'release');
let context: BrowserContext | undefined;
const problems: string[] = [];

const conn = (): string[] => ['--database-url', db.url, '--schema', db.schema];
const base = (): string => `http://127.0.0.1:${exporter!.port}`;
const SCHEDULE = [
  '--schedule',
  '0 * * * *',
  '--window-from-schedule',
  '--alert-after',
  '1s',
  '--alert-lookback',
  '1d',
  '--expect-duration',
  '1ms..20s',
];
const FAIL = ['-e', "process.stdout.write('boom\\n'); process.exit(3)"];
const OK = [fixture('exit-with.mjs'), '0'];
const runArgs = (n: number, child: string[], extra: string[] = []): string[] => [
  'run',
  ...conn(),
  '--name',
  JOB,
  ...SCHEDULE,
  '--scheduled-time',
  hoursAgo(n),
  '--record-output',
  '4KiB',
  ...extra,
  '--',
  process.execPath,
  ...child,
];
async function runAt(n: number, child: string[], extra: string[] = [], code = 0): Promise<void> {
  const r = await runCli(runArgs(n, child, extra));
  expect(r.exitCode, r.all).toBe(code);
}

async function newPage(viewport = { width: 1280, height: 900 }): Promise<Page> {
  const page = await context!.newPage();
  await page.setViewportSize(viewport);
  // A CSP violation (an inline style or script refused) or a dialog is a failure.
  page.on('console', (m) => {
    // The pages' empty favicon (`data:,`, so that no /favicon.ico is asked for) is refused by
    // default-src 'none' as it always was: not this grid's doing.
    if (m.type() === 'error' && !m.text().startsWith("Loading the image 'data:,'")) problems.push(m.text());
  });
  page.on('dialog', (d) => {
    problems.push(`dialog: ${d.message()}`);
    void d.dismiss();
  });
  return page;
}

/** Each cell of the job's strip on the current page: its window, state and what `check` says of it. */
const cellsOn = (page: Page, scope: string) =>
  page.locator(`${scope} .tgrid a.cell`).evaluateAll((as) =>
    as.map((a) => ({
      window: a.getAttribute('data-window')!,
      state: a.getAttribute('data-state')!,
      overdue: a.getAttribute('data-overdue'),
      href: a.getAttribute('href')!,
    })),
  );

describe.skipIf(!haveChromium)('the occurrence grid in chromium', () => {
  beforeAll(async () => {
    db = await testDb();
    await runAt(10, FAIL, [], 3);
    await runAt(9, OK);
    await runAt(8, FAIL, ['--max-attempts', '2'], 3);
    await runAt(7, FAIL, ['--max-attempts', '2'], 3);
    await runAt(7, FAIL, ['--max-attempts', '2'], 3);
    // 6: no run at all. 5: handled by hand.
    const marked = await runCli(['mark', ...conn(), '--name', JOB, '--window', keyOf(5), '--skipped']);
    expect(marked.exitCode, marked.all).toBe(0);
    await runAt(4, OK, ['--max-delay', '1m']);
    // 3 is replaced by 2 (--on-busy replace), the holder sees it at its next renewal.
    const holder = startCli(
      runArgs(3, [fixture('wait-for-file.mjs'), path.join(tmp, 'never'), '240000'], ['--ttl', '15s']),
    );
    await waitFor(
      'the holder of 3 hours ago to hold its lease',
      async () =>
        (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = $1 AND expires_at > now()`, [JOB])).length > 0,
    );
    await runAt(2, OK, ['--on-busy', 'replace']);
    expect((await holder).exitCode).toBe(75);
    const paused = await runCli(['pause', ...conn(), '--name', JOB, '--reason', 'maintenance']);
    expect(paused.exitCode, paused.all).toBe(0);
    await runAt(1, OK);
    expect((await runCli(['resume', ...conn(), '--name', JOB])).exitCode).toBe(0);
    // Registered just before the oldest, so every later tick is expected of it.
    await db.rows(`UPDATE ${db.schema}.jobs SET created_at = $2::timestamptz - interval '1 second' WHERE name = $1`, [
      JOB,
      hoursAgo(10),
    ]);
    // 0: running now, holding its lease until the tests are done.
    running = startCli(runArgs(0, [fixture('wait-for-file.mjs'), release, '240000']));
    await waitFor(
      'the current occurrence to be running',
      async () =>
        (
          await db.rows(
            `SELECT 1 FROM ${db.schema}.windows WHERE job = $1 AND window_key = $2 AND outcome = 'running'`,
            [JOB, keyOf(0)],
          )
        ).length > 0,
    );
    exporter = await startExporter(conn(), {}, { timeoutMs: 300_000 });
    context = await chromium.launchPersistentContext(path.join(tmp, 'chromium-profile'), {
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
    });
    mkdirSync(SHOTS, { recursive: true });
  }, 240_000);

  afterAll(async () => {
    await context?.close();
    writeFileSync(release, '');
    await running;
    await exporter?.stop();
    await db?.close();
  });

  it('the job page shows every occurrence in the state it was put in, with a legend', async () => {
    const page = await newPage();
    await page.goto(`${base()}/job?name=${JOB}`);
    const cells = await cellsOn(page, 'body');
    const byWindow = new Map(cells.map((c) => [c.window, c]));
    for (const [n, state] of Object.entries(EXPECTED))
      expect(byWindow.get(keyOf(Number(n)))?.state, `${n} hours ago`).toBe(state);
    // Oldest first.
    const order = Object.keys(EXPECTED)
      .map(Number)
      .sort((a, b) => b - a)
      .map(keyOf);
    expect(cells.map((c) => c.window).filter((w) => order.includes(w))).toEqual(order);
    for (const s of [
      'completed',
      'running',
      'retrying',
      'failed',
      'exhausted',
      'overdue',
      'missed',
      'skipped',
      'paused',
      'replaced',
    ])
      await expect(page.locator('#legend').getByText(s, { exact: true }).count()).resolves.toBe(1);
    await page.screenshot({ path: path.join(SHOTS, 'grid-job.png'), fullPage: false });
    await page.close();
  });

  it("each cell that check --json reports as due and not completed says so, in a state that agrees with check's outcome", async () => {
    const page = await newPage();
    const check = await runCli(['check', ...conn(), '--name', JOB, '--json']);
    await page.goto(`${base()}/job?name=${JOB}`);
    const cells = await cellsOn(page, 'body');
    const reported = (
      JSON.parse(check.stdout) as { problems: Array<{ occurrences?: Array<{ window: string; outcome: string }> }> }
    ).problems.flatMap((p) => p.occurrences ?? []);
    expect(reported.length).toBeGreaterThanOrEqual(6);
    const agrees: Record<string, string[]> = {
      'no run': ['overdue'],
      failed: ['failed', 'retrying'],
      lost: ['failed', 'retrying'],
      abandoned: ['failed'],
      exhausted: ['exhausted'],
      missed: ['missed'],
      running: ['running'],
      replaced: ['replaced'],
    };
    for (const o of reported) {
      const cell = cells.find((c) => c.window === o.window);
      expect(cell, o.window).toBeDefined();
      expect(cell!.overdue, o.window).toBe(o.outcome);
      expect(agrees[o.outcome], `${o.window} ${o.outcome}`).toContain(cell!.state);
    }
    // And only those: an outlined cell is one check reports (an hour passing meanwhile adds one at the end).
    const outlined = cells.filter((c) => c.overdue !== null).map((c) => c.window);
    expect(outlined.filter((w) => !reported.some((o) => o.window === w) && w <= keyOf(0))).toEqual([]);
    // The list's strip is the same picture.
    await page.goto(`${base()}/?q=${JOB}`);
    const listed = await cellsOn(page, '#jobs');
    for (const c of listed) expect(cells.find((x) => x.window === c.window)?.state, c.window).toBe(c.state);
    await page.screenshot({ path: path.join(SHOTS, 'grid-list.png'), fullPage: false });
    await page.close();
  });

  it('a cell leads to its occurrence: the attempts, hosts, tokens, exit codes, output tail and trace id', async () => {
    const page = await newPage();
    await page.goto(`${base()}/job?name=${JOB}`);
    await page.locator(`.tgrid a.cell[data-window="${keyOf(7)}"]`).click();
    await page.waitForURL(/\/occurrence\?/);
    expect(await page.locator('#state').innerText()).toBe('exhausted');
    expect(await page.locator('#trace-id').innerText()).toBe(occurrenceTraceId(JOB, keyOf(7)));
    const rows = await page
      .locator('#attempts tbody tr')
      .evaluateAll((trs) =>
        trs.map((tr) =>
          Object.fromEntries([...tr.querySelectorAll('td')].map((td) => [td.dataset.label, td.textContent!.trim()])),
        ),
      );
    expect(rows.map((r) => [r.Attempt, r.Outcome, r.Exit])).toEqual([
      ['1', 'failed', '3'],
      ['2', 'failed', '3'],
    ]);
    expect(new Set(rows.map((r) => r.Token)).size).toBe(2);
    for (const r of rows) expect(r.Host).not.toBe('-');
    expect(await page.locator('#output').innerText()).toBe('boom\n');
    // Nothing recorded of it: 404; no window, or a job name leasejob would refuse: 400.
    expect((await fetch(`${base()}/occurrence?name=${JOB}&window=never-seen`)).status).toBe(404);
    expect((await fetch(`${base()}/occurrence?name=${JOB}`)).status).toBe(400);
    expect((await fetch(`${base()}/occurrence?name=&window=w`)).status).toBe(400);
    await page.screenshot({ path: path.join(SHOTS, 'grid-occurrence.png'), fullPage: true });
    await page.close();
  });

  it('the job page charts the last runs against --expect-duration', async () => {
    const page = await newPage();
    await page.goto(`${base()}/job?name=${JOB}`);
    expect(await page.locator('#durations .band').count()).toBe(1);
    expect(await page.locator('#durations .bound').count()).toBe(2);
    // Finished runs: 10, 9, 8, 7, 3 (replaced), 2; the missed, marked and paused ones are not runs.
    expect(await page.locator('#durations rect.bar').count()).toBeGreaterThanOrEqual(6);
    expect(await page.locator('#durations rect.bar.failed').count()).toBeGreaterThanOrEqual(4);
    await page.close();
  });

  it("times in the reader's zone on request, kept from page to page", async () => {
    const page = await newPage();
    await page.goto(`${base()}/job?name=${JOB}&tz=America/New_York`);
    expect(await page.locator('p.meta').innerText()).toContain('times in America/New_York');
    const first = (await cellsOn(page, 'body'))[0]!;
    expect(first.href).toContain('tz=America%2FNew_York');
    // Not a zone: UTC, said so.
    await page.goto(`${base()}/job?name=${JOB}&tz=${encodeURIComponent('<b>Mars/Olympus')}`);
    expect(await page.locator('p.meta').innerText()).toContain('times in UTC');
    await page.close();
  });

  it("on a phone's width the grid wraps, with nothing wider than the screen", async () => {
    const page = await newPage({ width: 390, height: 844 });
    for (const url of [
      `/job?name=${JOB}`,
      `/?q=${JOB}`,
      `/occurrence?name=${JOB}&window=${encodeURIComponent(keyOf(7))}`,
    ]) {
      await page.goto(`${base()}${url}`);
      expect(await page.evaluate(() => document.documentElement.scrollWidth), url).toBeLessThanOrEqual(390);
    }
    await page.goto(`${base()}/job?name=${JOB}`);
    await page.screenshot({ path: path.join(SHOTS, 'grid-phone.png'), fullPage: false });
    expect(problems).toEqual([]);
    await page.close();
  });
});
