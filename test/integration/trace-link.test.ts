// Issue 27: a trace link template (--trace-link-template, LEASEJOB_TRACE_LINK_TEMPLATE) turns an
// occurrence's trace id into a link to the trace viewer: on the status page (followed in real
// Chromium), in `history` (the TRACE column, `traceUrl` in JSON) and in the webhook (`trace_url`).
// A template that is not an http(s) URL with {traceId} in it is refused before anything runs.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, runCli, startExporter } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { startReceiver, type Receiver } from '../helpers/http-receiver.js';
import { tempDir } from '../helpers/temp.js';
import { occurrenceTraceId } from '../../src/trace-context.js';

const CHROMIUM = process.env.LEASEJOB_CHROMIUM ?? '/usr/bin/chromium';
const TEMPLATE = 'https://tempo.example/explore?trace={traceId}&org=1';
const link = (traceId: string): string => TEMPLATE.replace('{traceId}', traceId);
const JOB = 'linked';

const tmp = tempDir('leasejob-trace-link-');
let db: TestDb;
let hook: Receiver;
beforeAll(async () => {
  db = await testDb();
  hook = await startReceiver();
  // One failed occurrence, its webhook sent with the template from the environment.
  const r = await runCli(
    ['run', ...conn(), '--name', JOB, '--window', 'w1', '--notify-url', `${hook.url}/hook`, '--', process.execPath, fixture('exit-with.mjs'), '3'],
    { LEASEJOB_TRACE_LINK_TEMPLATE: TEMPLATE },
  ); // prettier-ignore
  expect(r.exitCode, r.all).toBe(3);
});
afterAll(async () => {
  await hook?.close();
  await db?.close();
});

function conn(): string[] {
  return ['--database-url', db.url, '--schema', db.schema];
}

describe('trace links', () => {
  it('the webhook carries trace_url beside trace_id', () => {
    const body = JSON.parse(hook.requests.find((q) => q.path === '/hook')!.text!) as Record<string, unknown>;
    expect(body.trace_id).toBe(occurrenceTraceId(JOB, 'w1'));
    expect(body.trace_url).toBe(link(occurrenceTraceId(JOB, 'w1')));
  });

  it('history links the trace ids: the TRACE column, traceUrl in JSON; without a template, none', async () => {
    const traceId = occurrenceTraceId(JOB, 'w1');
    const text = await runCli([
      'history',
      ...conn(),
      '--name',
      JOB,
      '--by-occurrence',
      '--trace-link-template',
      TEMPLATE,
    ]);
    expect(text.exitCode, text.all).toBe(0);
    expect(text.stdout).toContain(link(traceId));
    const json = await runCli(['history', ...conn(), '--name', JOB, '--by-occurrence', '--json'], {
      LEASEJOB_TRACE_LINK_TEMPLATE: TEMPLATE,
    });
    expect(JSON.parse(json.stdout)[0]).toMatchObject({ traceId, traceUrl: link(traceId) });
    const events = await runCli(['history', ...conn(), '--name', JOB, '--json', '--trace-link-template', TEMPLATE]);
    const failed = (JSON.parse(events.stdout) as Array<{ kind: string; traceUrl?: string }>).find(
      (e) => e.kind === 'window-failed',
    );
    expect(failed?.traceUrl).toBe(link(traceId));
    const plain = await runCli(['history', ...conn(), '--name', JOB, '--by-occurrence', '--json'], {
      LEASEJOB_TRACE_LINK_TEMPLATE: undefined,
    });
    expect(JSON.parse(plain.stdout)[0].traceUrl).toBeUndefined();
  });

  it('refuses a template that is not an http(s) URL with {traceId} in it', async () => {
    for (const bad of ['https://tempo.example/trace/', 'ftp://x/{traceId}', 'not a url {traceId}']) {
      const r = await runCli(['history', ...conn(), '--name', JOB, '--trace-link-template', bad]);
      expect(r.exitCode, bad).toBe(64);
      expect(r.stderr).toContain('--trace-link-template');
    }
    const run = await runCli(['run', ...conn(), '--name', JOB, '--window', 'w2', '--', 'true'], {
      LEASEJOB_TRACE_LINK_TEMPLATE: 'https://tempo.example/trace',
    });
    expect(run.exitCode).toBe(64);
    expect(run.stderr).toContain('LEASEJOB_TRACE_LINK_TEMPLATE');
  });

  it.skipIf(!existsSync(CHROMIUM))('the status page shows the trace id as a link to the viewer', async () => {
    const exporter = await startExporter([...conn(), '--trace-link-template', TEMPLATE], {}, { timeoutMs: 120_000 });
    const context = await chromium.launchPersistentContext(path.join(tmp, 'chromium-profile'), {
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
    });
    try {
      const page = await context.newPage();
      await page.goto(`http://127.0.0.1:${exporter.port}/occurrence?name=${JOB}&window=w1`);
      const anchor = page.locator('a:has(#trace-id)');
      expect(await anchor.getAttribute('href')).toBe(link(occurrenceTraceId(JOB, 'w1')));
      expect(await page.locator('#trace-id').textContent()).toBe(occurrenceTraceId(JOB, 'w1'));
    } finally {
      await context.close();
      await exporter.stop();
    }
  });
});
