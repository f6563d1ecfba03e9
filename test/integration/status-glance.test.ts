// The status page read at a glance, in a real browser (Debian's chromium driven by playwright-core):
// each state that names a cause (failing, exhausted, missed, never ran, running late, paused,
// running, healthy) on a job real CLI runs put in it, chips that count what their filter shows,
// one line per job (20 and more in 1400x1000, 8 and more in a phone's first two screens), and a
// grid whose columns are the same instants for every job, labelled with times.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, fixture, runCli, startCli, startExporter, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { tempDir } from '../helpers/temp.js';

const CHROMIUM = process.env.LEASEJOB_CHROMIUM ?? '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
/** Screenshots for a person to look at; .tmp/ is gitignored. */
const SHOTS = process.env.LEASEJOB_SCREENSHOT_DIR ?? path.join(ROOT, '.tmp', 'screenshots');

const DAY_MS = 86_400_000;
// Daily at midnight UTC: the due occurrence is today's for the whole test unless midnight passes
// mid-test, which beforeAll waits out when it is near.
const dayBase = (): number => Math.floor(Date.now() / DAY_MS) * DAY_MS;
let DAY_BASE = dayBase();
const daysAgo = (n: number): string => new Date(DAY_BASE - n * DAY_MS).toISOString().replace('.000Z', 'Z');

/** Each job, the state real runs put it in. */
const EXPECTED: Record<string, string> = {
  'nightly-export': 'failing',
  'ledger-close': 'exhausted',
  'cache-warm': 'missed',
  'invoice-mail': 'never-ran',
  'search-reindex': 'running-late',
  'queue-drain': 'running',
  'backup-verify': 'paused',
  'report-build': 'healthy',
};
const BULK = 40;

const tmp = tempDir('leasejob-glance-');
let db: TestDb;
let exporter: { port: number; stop: () => Promise<unknown> } | undefined;
const holders: Array<ReturnType<typeof startCli>> = [];
const release = path.join(tmp, 'release');
let context: BrowserContext | undefined;
const problems: string[] = [];

const conn = (): string[] => ['--database-url', db.url, '--schema', db.schema];
const base = (): string => `http://127.0.0.1:${exporter!.port}`;
const DAILY = ['--schedule', '0 0 * * *', '--window-from-schedule', '--alert-after', '1s'];
const OK = [process.execPath, fixture('exit-with.mjs'), '0'];
const FAIL = [process.execPath, fixture('exit-with.mjs'), '3'];
const HOLD = [process.execPath, fixture('wait-for-file.mjs'), release, '240000'];

async function run(name: string, n: number, child: string[], extra: string[] = [], code = 0): Promise<void> {
  const r = await runCli([
    'run',
    ...conn(),
    '--name',
    name,
    ...DAILY,
    '--scheduled-time',
    daysAgo(n),
    ...extra,
    '--',
    ...child,
  ]);
  expect(r.exitCode, `${name}: ${r.all}`).toBe(code);
}

async function hold(name: string, args: string[]): Promise<void> {
  holders.push(startCli(['run', ...conn(), '--name', name, ...args, '--', ...HOLD]));
  await waitFor(
    `${name} to hold its lease`,
    async () =>
      (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = $1 AND expires_at > now()`, [name])).length > 0,
  );
}

async function newPage(viewport: { width: number; height: number }): Promise<Page> {
  const page = await context!.newPage();
  await page.setViewportSize(viewport);
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith("Loading the image 'data:,'")) problems.push(m.text());
  });
  page.on('dialog', (d) => {
    problems.push(`dialog: ${d.message()}`);
    void d.dismiss();
  });
  return page;
}

/** Rows whose whole box is within the viewport's first `screens` screens, at the top of the page. */
const rowsWithin = (page: Page, height: number) =>
  page
    .locator('#jobs tbody tr')
    .evaluateAll(
      (trs, h) =>
        trs.filter((tr) => tr.getBoundingClientRect().bottom <= h && tr.getBoundingClientRect().top >= 0).length,
      height,
    );

describe.skipIf(!haveChromium)('the status page at a glance, in chromium', () => {
  beforeAll(async () => {
    // Midnight UTC passing mid-test makes a new occurrence due for every daily job: wait it out,
    // and a minute past it, so that today's runs come later than --max-delay 1s.
    await waitFor(
      'not to be within 10 minutes before midnight UTC, nor a minute after',
      async () => dayBase() + DAY_MS - Date.now() > 600_000 && Date.now() - dayBase() > 60_000,
      { timeoutMs: 700_000 },
    );
    DAY_BASE = dayBase();
    db = await testDb();
    const registeredBefore = async (name: string, days: number): Promise<void> => {
      await db.rows(`UPDATE ${db.schema}.jobs SET created_at = $2::timestamptz - interval '1 second' WHERE name = $1`, [
        name,
        daysAgo(days),
      ]);
    };
    await Promise.all([
      // Completed yesterday, failed today.
      (async () => {
        await run('nightly-export', 1, OK);
        await run('nightly-export', 0, FAIL, [], 3);
        await registeredBefore('nightly-export', 1);
      })(),
      // Today's run failed its only attempt (--max-attempts 1): exhausted.
      (async () => {
        await run('ledger-close', 0, FAIL, ['--max-attempts', '1'], 3);
        await registeredBefore('ledger-close', 0);
      })(),
      // Today's run came later than --max-delay allows: missed.
      (async () => {
        await run('cache-warm', 0, OK, ['--max-delay', '1s']);
        await registeredBefore('cache-warm', 0);
      })(),
      // Ran two days ago; no host ran yesterday's or today's.
      (async () => {
        await run('invoice-mail', 2, OK);
        await registeredBefore('invoice-mail', 2);
      })(),
      // Completed yesterday and today.
      (async () => {
        await run('report-build', 1, OK);
        await run('report-build', 0, OK);
        await registeredBefore('report-build', 1);
      })(),
      // Paused by an operator after a run.
      (async () => {
        await run('backup-verify', 0, OK);
        const p = await runCli(['pause', ...conn(), '--name', 'backup-verify', '--reason', 'storage migration']);
        expect(p.exitCode, p.all).toBe(0);
      })(),
    ]);
    await hold('search-reindex', [...DAILY, '--scheduled-time', daysAgo(0)]);
    await registeredBefore('search-reindex', 0);
    await hold('queue-drain', ['--window', 'batch-1']);
    // Enough healthy jobs to fill more than a screen (their state is no run's doing: none ran).
    await db.rows(
      `INSERT INTO ${db.schema}.jobs (name, schedule, tz, window_mode)
       SELECT 'bulk-' || lpad(i::text, 3, '0'), NULL, NULL, 'literal' FROM generate_series(1, $1::int) i`,
      [BULK],
    );
    exporter = await startExporter(conn(), {}, { timeoutMs: 300_000 });
    context = await chromium.launchPersistentContext(path.join(tmp, 'chromium-profile'), {
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
    });
    mkdirSync(SHOTS, { recursive: true });
  }, 900_000);

  afterAll(async () => {
    await context?.close();
    writeFileSync(release, '');
    await Promise.all(holders);
    await exporter?.stop();
    await db?.close();
  });

  it('each job shows the state that names its cause, as its own badge, worst first', async () => {
    const page = await newPage({ width: 1400, height: 1000 });
    await page.goto(`${base()}/`);
    const rows = await page.locator('#jobs tbody tr').evaluateAll((trs) =>
      trs.map((tr) => ({
        job: tr.getAttribute('data-job')!,
        state: tr.getAttribute('data-state')!,
        badge: (tr.querySelector('.state') as HTMLElement).innerText,
        colour: getComputedStyle(tr.querySelector('.state')!).backgroundColor,
        border: getComputedStyle(tr.querySelector('.state')!).borderColor,
      })),
    );
    for (const [job, state] of Object.entries(EXPECTED)) {
      const row = rows.find((r) => r.job === job);
      expect(row?.state, job).toBe(state);
      expect(row!.badge, job).toBe(state.replace('-', ' ').toUpperCase());
    }
    // Each state its own colour.
    const colours = new Set(
      Object.values(EXPECTED).map((s) => {
        const r = rows.find((x) => x.state === s)!;
        return r.colour === 'rgba(0, 0, 0, 0)' ? r.border : r.colour;
      }),
    );
    expect(colours.size).toBe(Object.keys(EXPECTED).length);
    // Worst first: the order of the chips.
    const order = ['failing', 'exhausted', 'missed', 'never-ran', 'running-late', 'paused', 'running', 'healthy'];
    const ranks = rows.map((r) => order.indexOf(r.state));
    expect(ranks).toEqual([...ranks].sort((a, b) => a - b));
    // The cause in words beside it: the occurrence and its outcome.
    const why = (job: string) => page.locator(`#jobs tr[data-job="${job}"] td.why`).innerText();
    expect(await why('nightly-export')).toContain(`window ${daysAgo(0)} (failed) overdue since`);
    expect(await why('cache-warm')).toContain('(missed)');
    expect(await why('invoice-mail')).toMatch(/2 due occurrences not completed, the oldest \S+ \(no run\)/);
    expect(await why('search-reindex')).toMatch(/\(running\) overdue since[\s\S]*running on \S+:\d+:\w+/);
    expect(await why('backup-verify')).toContain('storage migration');
    await page.close();
  });

  it('the chips count exactly what their filter shows; ?state= agrees', async () => {
    const page = await newPage({ width: 1400, height: 1000 });
    await page.goto(`${base()}/?per=1000`);
    const chips = await page.locator('#chips a').evaluateAll((as) =>
      as.map((a) => ({
        state: a.getAttribute('data-state')!,
        n: Number(a.querySelector('.n')!.textContent),
        href: a.getAttribute('href')!,
      })),
    );
    expect(chips.map((c) => c.state)).toEqual([
      '',
      'failing',
      'exhausted',
      'missed',
      'never-ran',
      'running-late',
      'paused',
      'running',
      'healthy',
    ]);
    expect(chips[0]!.n).toBe(Object.keys(EXPECTED).length + BULK);
    for (const c of chips.slice(1)) {
      await page.goto(`${base()}${c.href}${c.href.includes('?') ? '&' : '?'}per=1000`);
      const states = await page
        .locator('#jobs tbody tr')
        .evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-state')));
      expect(states.length, c.state).toBe(c.n);
      expect(new Set(states), c.state).toEqual(c.n ? new Set([c.state]) : new Set());
      expect(await page.locator(`#chips a[data-state="${c.state}"]`).getAttribute('aria-current')).toBe('true');
    }
    // The job running past its grace is counted where its filter lists it.
    expect(chips.find((c) => c.state === 'running-late')!.n).toBe(1);
    expect(chips.find((c) => c.state === 'running')!.n).toBe(1);
    await page.close();
  });

  it('one line per job: 20 and more in 1400x1000', async () => {
    const page = await newPage({ width: 1400, height: 1000 });
    await page.goto(`${base()}/`);
    expect(await rowsWithin(page, 1000)).toBeGreaterThanOrEqual(20);
    // One line: every row as tall as a healthy one.
    const heights = await page
      .locator('#jobs tbody tr')
      .evaluateAll((trs) => trs.map((tr) => Math.round(tr.getBoundingClientRect().height)));
    expect(Math.max(...heights)).toBeLessThanOrEqual(40);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(1400);
    await page.screenshot({ path: path.join(SHOTS, 'glance-desktop-1400x1000.png'), fullPage: false });
    await page.close();
  });

  it('on a phone (390x844): a compact row per job, 8 and more in the first two screens, the grid time-labelled', async () => {
    const page = await newPage({ width: 390, height: 844 });
    await page.goto(`${base()}/`);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    expect(await rowsWithin(page, 2 * 844)).toBeGreaterThanOrEqual(8);
    // Each row's strip has its time axis under it (no hover on a phone).
    const first = page.locator('#jobs tbody tr').first();
    expect(await first.locator('.phone-axis').isVisible()).toBe(true);
    expect(await first.locator('.phone-axis span').first().innerText()).toMatch(/^[A-Z][a-z]{2} \d{1,2}$|^\d\d:\d\d$/);
    await page.screenshot({ path: path.join(SHOTS, 'glance-phone-390x844.png'), fullPage: false });
    await page.evaluate(() => window.scrollTo(0, 844));
    await page.screenshot({ path: path.join(SHOTS, 'glance-phone-390x844-screen2.png'), fullPage: false });
    await page.close();
  });

  it('the grid is aligned in time: the same columns at the same x for every job, labelled, each cell carrying its time', async () => {
    const page = await newPage({ width: 1400, height: 1000 });
    await page.goto(`${base()}/?every=1h`);
    expect(await page.locator('.steps a[aria-current]').innerText()).toBe('1h');
    const strips = await page.locator('#jobs tbody tr').evaluateAll((trs) =>
      trs.map((tr) =>
        [...tr.querySelectorAll('.tgrid .cell')].map((c) => ({
          x: Math.round(c.getBoundingClientRect().left * 10) / 10,
          at: c.getAttribute('data-at'),
        })),
      ),
    );
    expect(strips.length).toBeGreaterThanOrEqual(20);
    for (const s of strips) {
      expect(s.length).toBe(24);
      expect(s.map((c) => c.x)).toEqual(strips[0]!.map((c) => c.x));
      expect(s.map((c) => c.at)).toEqual(strips[0]!.map((c) => c.at));
    }
    // Hourly columns ending with the one that holds now.
    const ats = strips[0]!.map((c) => Date.parse(c.at!));
    for (let i = 1; i < ats.length; i++) expect(ats[i]! - ats[i - 1]!).toBe(3_600_000);
    // The last holds the page's database time.
    const dbNow = Date.parse((await page.locator('header .meta time').getAttribute('datetime'))!);
    expect(ats.at(-1)! <= dbNow && dbNow < ats.at(-1)! + 3_600_000).toBe(true);
    // The axis: a time label above every sixth column, at that column's x.
    const labels = await page.locator('#jobs thead .axis span').evaluateAll((ss) =>
      ss.map((s) => ({
        text: (s as HTMLElement).innerText,
        x: Math.round(s.getBoundingClientRect().left * 10) / 10,
      })),
    );
    expect(labels.length).toBe(4);
    labels.forEach((l, i) => {
      expect(l.text).toBe(new Date(ats[i * 6]!).toISOString().slice(11, 16));
      expect(Math.abs(l.x - strips[0]![i * 6]!.x)).toBeLessThanOrEqual(1);
    });
    // Today's midnight column of the failing job: a link whose title and text carry its time.
    const cell = page.locator('#jobs tr[data-job="nightly-export"] .tgrid a.cell').last();
    const span = `${daysAgo(0).slice(0, 10)} 00:00–01:00 UTC`;
    expect(await cell.getAttribute('title')).toContain(span);
    expect(await cell.getAttribute('data-state')).toBe('failed');
    expect(await cell.textContent()).toContain(span);
    expect(await cell.getAttribute('href')).toContain('/occurrence?name=nightly-export');
    // Red outline: what check reports.
    const check = JSON.parse((await runCli(['check', ...conn(), '--name', 'nightly-export', '--json'])).stdout) as {
      problems: Array<{ occurrences?: Array<{ window: string }> }>;
    };
    expect(check.problems.flatMap((p) => p.occurrences ?? []).map((o) => o.window)).toContain(daysAgo(0));
    expect(await cell.getAttribute('data-overdue')).toBe('failed');
    await page.goto(`${base()}/?every=1h&tz=Asia/Kolkata`);
    expect(await page.locator('#jobs thead .axis span').first().innerText()).toMatch(/^\d\d:30$/);
    await page.goto(`${base()}/?every=1h`);
    await page.screenshot({ path: path.join(SHOTS, 'glance-desktop-hourly-columns.png'), fullPage: false });
    expect(problems).toEqual([]);
    await page.close();
  });

  it('the job page: successful runs are not drawn in the running blue, a sub-second run says milliseconds', async () => {
    const page = await newPage({ width: 1400, height: 1000 });
    await page.goto(`${base()}/job?name=report-build`);
    const fills = await page
      .locator('#durations rect.bar')
      .evaluateAll((rs) => rs.map((r) => getComputedStyle(r).fill));
    expect(fills.length).toBe(2);
    const running = await page
      .locator('.state')
      .first()
      .evaluate(() => {
        const probe = document.createElement('span');
        probe.className = 'state s-running';
        document.body.append(probe);
        const colour = getComputedStyle(probe).color;
        probe.remove();
        return colour;
      });
    for (const f of fills) expect(f).not.toBe(running);
    const last = await page
      .locator('dl.facts dt', { hasText: 'Last completed' })
      .locator('xpath=following-sibling::dd[1]')
      .innerText();
    // Started to finished on the database clock: under a second unless the machine is very busy.
    expect(last).toMatch(/took (\d{1,3} ms|\d+(\.\d)?s)$/);
    expect(last).not.toMatch(/took 0s/);
    expect(await page.locator('.tgrid.cols-48 .cell').count()).toBe(48);
    await page.screenshot({ path: path.join(SHOTS, 'glance-job-page.png'), fullPage: true });
    await page.close();
  });
});
