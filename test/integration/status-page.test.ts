// The exporter's status page in a real browser (Debian's chromium driven by playwright-core):
// what a person sees for a job no host ran, a failing and a running one, hostile strings shown as text
// with no script run, events in sequence order, search among 10,000 jobs, and a phone's width.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, fixture, runCli, startCli, startExporter, waitFor } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { startProxy } from '../helpers/proxy.mjs';
import { tempDir } from '../helpers/temp.js';

const CHROMIUM = process.env.LEASEJOB_CHROMIUM ?? '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium)
  console.log(
    `skipping the status page's browser tests: no chromium at ${CHROMIUM} (apt-get install chromium, or set LEASEJOB_CHROMIUM)`,
  );
/** Screenshots for a person to look at; .tmp/ is gitignored. */
const SHOTS = process.env.LEASEJOB_SCREENSHOT_DIR ?? path.join(ROOT, '.tmp', 'screenshots');

// Job names are validated only for length and control characters: markup is a valid name.
const HOSTILE = '<img src=x onerror=alert(1)>';
const HOSTILE_WINDOW = '"><script>alert(2)</script>';
const HOSTILE_HOST = '<svg onload=alert(3)>';
const HOSTILE_DETAIL = '</pre><script>alert(4)</script>';
const HOSTILE_REASON = '<iframe src=javascript:alert(5)>';
const HOSTILE_OUTPUT = '</pre><script>alert(6)</script>\u001b[31mred';
const BULK = 10_000;
const NEEDLE = 'needle-in-the-haystack';
/** Its latest occurrence completed, two earlier ones not (one failed, one no host ran). */
const GAPS = 'missed-earlier';
// Hourly, from a fixed top of the hour: an hour passing mid-test makes one more occurrence due
// (the latest, then overdue too), which the assertions allow for.
const HOUR_BASE = Math.floor(Date.now() / 3_600_000) * 3_600_000;
const hoursAgo = (n: number): string => new Date(HOUR_BASE - n * 3_600_000).toISOString().replace('.000Z', 'Z');

const tmp = tempDir('leasejob-page-');
let db: TestDb;
let exporter: { port: number; stop: () => Promise<unknown> } | undefined;
let running: ReturnType<typeof startCli> | undefined;
const release = path.join(tmp, 'release');
let context: BrowserContext | undefined;
const dialogs: string[] = [];

const conn = (): string[] => ['--database-url', db.url, '--schema', db.schema];
const base = (): string => `http://127.0.0.1:${exporter!.port}`;

const startPageExporter = (): Promise<{ port: number; stop: () => Promise<unknown> }> =>
  startExporter(conn(), {}, { timeoutMs: 300_000 });

async function newPage(viewport = { width: 1280, height: 900 }): Promise<Page> {
  const page = await context!.newPage();
  await page.setViewportSize(viewport);
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  return page;
}

describe.skipIf(!haveChromium)('status page in chromium', () => {
  beforeAll(async () => {
    db = await testDb();
    // Overdue: an hourly job that has run before (registered a day ago) and whose latest window is not done.
    const hourly = await runCli([
      'run',
      ...conn(),
      '--name',
      'hourly-report',
      '--schedule',
      '0 * * * *',
      '--window-from-schedule',
      '--alert-after',
      '1s',
      '--scheduled-time',
      '2020-01-01T00:00:00Z',
      '--',
      process.execPath,
      fixture('exit-with.mjs'),
      '0',
    ]);
    expect(hourly.exitCode, hourly.all).toBe(0);
    await db.rows(`UPDATE ${db.schema}.jobs SET created_at = now() - interval '1 day' WHERE name = 'hourly-report'`);
    // Earlier due occurrences not completed although the latest is: failed two hours ago, not
    // run an hour ago, completed now. Registered just before the failed one.
    const gaps = ['--name', GAPS, '--schedule', '0 * * * *', '--window-from-schedule', '--alert-after', '1s'];
    for (const [at, code] of [
      [hoursAgo(2), 3],
      [hoursAgo(0), 0],
    ] as const) {
      const r = await runCli([
        'run',
        ...conn(),
        ...gaps,
        '--scheduled-time',
        at,
        '--',
        process.execPath,
        fixture('exit-with.mjs'),
        String(code),
      ]);
      expect(r.exitCode, r.all).toBe(code);
    }
    await db.rows(`UPDATE ${db.schema}.jobs SET created_at = $2::timestamptz - interval '1 second' WHERE name = $1`, [
      GAPS,
      hoursAgo(2),
    ]);
    // Failing, with hostile strings in its name, window, recorded output and an event's detail.
    for (let i = 0; i < 2; i++) {
      const r = await runCli([
        'run',
        ...conn(),
        '--name',
        HOSTILE,
        '--window',
        HOSTILE_WINDOW,
        '--record-output',
        '4KiB',
        '--',
        process.execPath,
        '-e',
        `process.stdout.write(${JSON.stringify(HOSTILE_OUTPUT)}); process.exit(4)`,
      ]);
      expect(r.exitCode, r.all).toBe(4);
    }
    await db.rows(`SELECT ${db.schema}.record_event($1, 'note', $2, 'test:1:x', NULL, now(), $3::jsonb)`, [
      HOSTILE,
      HOSTILE_WINDOW,
      JSON.stringify({ reason: HOSTILE_DETAIL }),
    ]);
    await db.rows(
      `INSERT INTO ${db.schema}.hosts (host, offset_ms, uncertainty_ms) VALUES ($1, 2500, 4), ('calm-host', -3, 1)`,
      [HOSTILE_HOST],
    );
    // Paused by an operator, with a hostile reason.
    const once = await runCli([
      'run',
      ...conn(),
      '--name',
      'paused-job',
      '--window',
      'w1',
      '--',
      process.execPath,
      fixture('exit-with.mjs'),
      '0',
    ]);
    expect(once.exitCode, once.all).toBe(0);
    const paused = await runCli(['pause', ...conn(), '--name', 'paused-job', '--reason', HOSTILE_REASON]);
    expect(paused.exitCode, paused.all).toBe(0);
    // Running: holds its lease until the test lets it go.
    running = startCli([
      'run',
      ...conn(),
      '--name',
      'long-runner',
      '--window',
      'w1',
      '--',
      process.execPath,
      fixture('wait-for-file.mjs'),
      release,
      '240000',
    ]);
    await waitFor(
      'long-runner to hold its lease',
      async () =>
        (await db.rows(`SELECT 1 FROM ${db.schema}.leases WHERE name = 'long-runner' AND expires_at > now()`)).length >
        0,
    );
    // Many: 10,000 healthy jobs, one of them the needle.
    await db.rows(
      `INSERT INTO ${db.schema}.jobs (name, schedule, tz, window_mode)
       SELECT CASE WHEN i = 7342 THEN $1 ELSE 'bulk-' || lpad(i::text, 5, '0') END, '*/15 * * * *', 'Europe/Berlin', 'literal'
         FROM generate_series(1, $2::int) i`,
      [NEEDLE, BULK],
    );
    exporter = await startPageExporter();
    // A fresh profile each time: nothing carried over from another run or another agent.
    const profile = path.join(tmp, 'chromium-profile');
    context = await chromium.launchPersistentContext(profile, {
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

  it("the list shows each job's state as a person reads it, naming the cause: never ran, failing, running", async () => {
    const page = await newPage();
    const stateOf = (name: string) =>
      page.locator('#jobs tbody tr', { has: page.getByRole('link', { name, exact: true }) }).locator('.state');
    // Worst first: a failing job heads the list.
    await page.goto(`${base()}/`);
    expect(await page.locator('#jobs tbody tr').first().locator('td[data-label="Job"] a').innerText()).toBe(HOSTILE);
    // Its latest hour no host ran.
    expect(await stateOf('hourly-report').innerText()).toBe('NEVER RAN');
    expect(
      await page
        .locator('#jobs tbody tr', { has: page.getByRole('link', { name: 'hourly-report', exact: true }) })
        .innerText(),
    ).toMatch(/\(no run\) overdue since/);
    expect(await stateOf(HOSTILE).innerText()).toBe('FAILING');
    expect(await stateOf('long-runner').innerText()).toBe('RUNNING');
    expect(await stateOf('paused-job').innerText()).toBe('PAUSED');
    expect(
      await page
        .locator('#jobs tbody tr', { has: page.getByRole('link', { name: 'long-runner', exact: true }) })
        .innerText(),
    ).toMatch(/running on \S+:\d+:\w+/);
    // Summary counts, and 100 rows of the 10,005 jobs on the first page.
    expect(await page.locator('.summary').innerText()).toMatch(
      /all\s+10005[\s\S]*failing\s+2[\s\S]*never ran\s+1[\s\S]*paused\s+1[\s\S]*running\s+1[\s\S]*healthy\s+10000/,
    );
    expect(await page.locator('#jobs tbody tr').count()).toBe(100);
    expect(await page.locator('#shown').innerText()).toBe('Jobs 1-100 of 10005');
    // A single test database: nothing to say about replication.
    expect(await page.locator('#replication').count()).toBe(0);
    await page.screenshot({ path: path.join(SHOTS, 'status-list.png'), fullPage: false });
    await page.close();
  });

  it('a job whose latest occurrence completed but an earlier one failed reads as failing, and its page lists them', async () => {
    const page = await newPage();
    await page.goto(`${base()}/?q=${GAPS}`);
    const row = page.locator('#jobs tbody tr', { has: page.getByRole('link', { name: GAPS, exact: true }) });
    expect(await row.locator('.state').innerText()).toBe('FAILING');
    // Two earlier ones (three if an hour passed since the runs: the new latest is due too).
    expect(await row.locator('.not-completed').innerText()).toMatch(
      new RegExp(`^[23] due occurrences not completed, the oldest ${hoursAgo(2)} \\(failed\\) overdue since `),
    );
    // Its last completed window is the latest one: what hid the earlier ones before.
    expect(await row.locator('td.last').getAttribute('title')).toBe(`window ${hoursAgo(0)}`);
    await row.getByRole('link', { name: GAPS, exact: true }).click();
    await page.waitForURL(/\/job\?name=/);
    expect(await page.locator('.state').first().innerText()).toBe('FAILING');
    const listed = await page.locator('#not-completed tbody tr').allInnerTexts();
    expect(listed[0]).toMatch(new RegExp(`^${hoursAgo(2)}\\s+failed\\s`));
    expect(listed[1]).toMatch(new RegExp(`^${hoursAgo(1)}\\s+no run\\s`));
    expect(listed.length).toBeGreaterThanOrEqual(2);
    expect(await page.locator('h2', { hasText: 'Due occurrences not completed' }).count()).toBe(1);
    await page.screenshot({ path: path.join(SHOTS, 'status-not-completed.png'), fullPage: true });
    await page.close();
  });

  it('hostile strings render as text: the name, its window, a host and an event detail; no script runs', async () => {
    const page = await newPage();
    await page.goto(`${base()}/?state=failing`);
    const link = page.getByRole('link', { name: HOSTILE, exact: true });
    expect(await link.innerText()).toBe(HOSTILE);
    expect(await page.locator('#jobs').innerText()).toContain(HOSTILE_WINDOW);
    expect(await page.locator('#hosts').innerText()).toContain(HOSTILE_HOST);
    // The worst-off host first: the one 2.5 s away.
    expect(await page.locator('#hosts tbody tr').first().innerText()).toMatch(/\+2500 ms/);
    // The only SVG is the page's own duration chart.
    expect(
      await page.locator('body img, body script, body svg:not(#durations), #durations foreignObject').count(),
    ).toBe(0);
    await page.goto(`${base()}/?state=paused`);
    const pausedRow = await page.locator('#jobs tbody tr').innerText();
    expect(pausedRow).toContain('until resumed by ');
    expect(pausedRow).toContain(`: ${HOSTILE_REASON}`);
    expect(await page.locator('body iframe').count()).toBe(0);
    await page.goto(`${base()}/?state=failing`);
    await link.click();
    await page.waitForURL(/\/job\?name=/);
    expect(await page.locator('#job-name').innerText()).toBe(HOSTILE);
    expect(await page.title()).toBe(`${HOSTILE} · leasejob`);
    expect(await page.locator('#windows').innerText()).toContain(HOSTILE_WINDOW);
    expect(await page.locator('#events').innerText()).toContain(HOSTILE_DETAIL);
    // The recorded output, as text (the terminal escape shown as U+FFFD), linked from its window.
    expect(await page.locator('#output-0 pre').innerText()).toBe(HOSTILE_OUTPUT.replace('\u001b', '\uFFFD'));
    expect(await page.locator('#output-0 h3').innerText()).toMatch(/failed, attempt 2, generation 2, exit 4$/);
    expect(await page.locator('#windows').getByRole('link', { name: 'output' }).getAttribute('href')).toBe('#output-0');
    // The only SVG is the page's own duration chart.
    expect(
      await page.locator('body img, body script, body svg:not(#durations), #durations foreignObject').count(),
    ).toBe(0);
    expect(dialogs).toEqual([]);
    await page.close();
  });

  it('a job page lists its windows and its events in sequence order, both clocks and the offset side by side', async () => {
    const page = await newPage();
    await page.goto(`${base()}/job?name=${encodeURIComponent(HOSTILE)}`);
    const seqs = (await page.locator('#events td.seq').allInnerTexts()).map(Number);
    expect(seqs.length).toBeGreaterThan(5);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    const header = await page.locator('#events thead').innerText();
    expect(header).toMatch(/Database time\s+Host time\s+Offset/);
    const firstRow = await page.locator('#events tbody tr').first().innerText();
    expect(firstRow).toMatch(
      /acquired[\s\S]*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z[\s\S]*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z[\s\S]*-?\d+ ms/,
    );
    // The failed window, attempt 2, exit 4.
    const w = await page.locator('#windows tbody tr').first().innerText();
    expect(w).toMatch(/failed\s+2\s+2\s+[\s\S]*\s4\s+output$/);
    expect(await page.locator('.state').first().innerText()).toBe('FAILING');
    await page.screenshot({ path: path.join(SHOTS, 'status-job.png'), fullPage: true });
    await page.close();
  });

  it('search finds one job among 10,000; pages step through the rest', async () => {
    const page = await newPage();
    await page.goto(`${base()}/`);
    await page.getByRole('searchbox', { name: 'Search job names' }).fill('HAYSTACK');
    await Promise.all([page.waitForURL(/q=HAYSTACK/), page.getByRole('button', { name: 'Search' }).click()]);
    expect(await page.locator('#jobs tbody tr').count()).toBe(1);
    expect(await page.locator('#jobs tbody tr').getByRole('link').innerText()).toBe(NEEDLE);
    expect(await page.locator('#shown').innerText()).toBe('Jobs 1-1 of 1 matching (10005 in all)');
    expect(await page.locator('#jobs tbody tr').innerText()).toMatch(/HEALTHY[\s\S]*\*\/15 \* \* \* \* Europe\/Berlin/);

    await page.goto(`${base()}/?q=bulk-`);
    expect(await page.locator('#shown').innerText()).toBe('Jobs 1-100 of 9999 matching (10005 in all)');
    await Promise.all([page.waitForURL(/page=2/), page.getByRole('link', { name: 'next →' }).click()]);
    expect(await page.locator('#shown').innerText()).toBe('Jobs 101-200 of 9999 matching (10005 in all)');
    expect(await page.locator('#jobs tbody tr').first().getByRole('link').innerText()).toBe('bulk-00101');
    expect(await page.locator('.pager').innerText()).toContain('page 2 of 100');
    await page.close();
  });

  it("on a phone's width the list reads as compact rows, with nothing wider than the screen", async () => {
    const page = await newPage({ width: 390, height: 844 });
    await page.goto(`${base()}/?per=20`);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    expect(await page.locator('#jobs thead').isVisible()).toBe(false);
    expect(await page.locator('#jobs tbody tr').first().innerText()).toMatch(
      /^<img src=x onerror=alert\(1\)>\s+FAILING/,
    );
    await page.screenshot({ path: path.join(SHOTS, 'status-phone.png'), fullPage: false });
    await page.goto(`${base()}/job?name=${encodeURIComponent(HOSTILE)}`);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await page.close();
  });

  it('read-only and self-contained: HEAD answers without a body, POST is refused, nothing is loaded from elsewhere', async () => {
    const head = await fetch(`${base()}/`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
    expect(head.headers.get('content-security-policy')).toContain("default-src 'none'");
    const post = await fetch(`${base()}/`, { method: 'POST', body: 'x' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
    expect((await fetch(`${base()}/job?name=no-such-job`)).status).toBe(404);
    expect((await fetch(`${base()}/job`)).status).toBe(400);
    const page = await newPage();
    const requests: string[] = [];
    page.on('request', (r) => requests.push(r.url()));
    await page.goto(`${base()}/`);
    await page.goto(`${base()}/job?name=hourly-report`);
    expect(requests.filter((u) => !u.startsWith(base()))).toEqual([]);
    await page.close();
  });
});

describe('without a browser', () => {
  const exporterOn = (url: string, schema: string, ...extra: string[]) =>
    startExporter(['--database-url', url, '--schema', schema, ...extra]);

  it('with the database cut off the page says so (503), and recovers', async () => {
    const own = await testDb();
    const proxy = await startProxy(own.url);
    const { p, port } = await exporterOn(proxy.url(own.url), own.schema);
    try {
      expect((await fetch(`http://127.0.0.1:${port}/`)).status).toBe(200);
      proxy.cut('reset');
      const down = await fetch(`http://127.0.0.1:${port}/`);
      expect(down.status).toBe(503);
      expect(await down.text()).toContain('<h1>Database unreachable</h1>');
      proxy.heal();
      await waitFor(
        'the page to read the database again',
        async () => (await fetch(`http://127.0.0.1:${port}/`)).status === 200,
      );
    } finally {
      p.kill('SIGTERM');
      await p;
      await proxy.close();
      await own.close();
    }
  });

  it('--no-status-page serves only /metrics and /healthz', async () => {
    const own = await testDb();
    const { p, port } = await exporterOn(own.url, own.schema, '--no-status-page');
    try {
      const root = await fetch(`http://127.0.0.1:${port}/`);
      expect(root.status).toBe(404);
      expect(await root.text()).toBe('leasejob exporter: see /metrics and /healthz\n');
      expect((await fetch(`http://127.0.0.1:${port}/job?name=x`)).status).toBe(404);
      expect((await fetch(`http://127.0.0.1:${port}/occurrence?name=x&window=w`)).status).toBe(404);
      expect((await fetch(`http://127.0.0.1:${port}/metrics`)).status).toBe(200);
    } finally {
      p.kill('SIGTERM');
      await p;
      await own.close();
    }
  });
});
