// What the Grafana dashboard and the chart's alert rules query is what the exporter exports:
// every metric name their PromQL reads is a family of a real scrape of the real exporter.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chartTemplate } from '../deploy/deploy-files.js';
import { DASHBOARD_FILE, dashboardQueries, type Dashboard } from '../deploy/dashboard-files.js';
import { labelValuesMetric, metricNames } from '../deploy/promql-names.js';
import { scrapeOnce } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';

let db: TestDb;
let exported: Set<string>;

beforeAll(async () => {
  db = await testDb();
  const text = await scrapeOnce(['--database-url', db.url, '--schema', db.schema]);
  // Every family says its TYPE, with or without series (an empty schema has few series).
  exported = new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!));
});
afterAll(async () => {
  await db.close();
});

describe('metric names against a real scrape', () => {
  it('the scrape names the families (so the comparisons below cannot pass on an empty set)', () => {
    expect(exported).toContain('leasejob_window_overdue');
    expect(exported).toContain('leasejob_clock_offset_seconds');
    expect(exported.size).toBeGreaterThan(20);
  });

  it('every metric a dashboard panel or variable queries is exported', () => {
    const dashboard = JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8')) as Dashboard;
    const missing = dashboardQueries(dashboard).flatMap((q) =>
      (labelValuesMetric(q) !== undefined ? [labelValuesMetric(q)!] : metricNames(q))
        .filter((n) => !exported.has(n))
        .map((n) => `${n} in ${q}`),
    );
    expect(missing).toEqual([]);
  });

  it('every metric an alert rule of the chart queries is exported', () => {
    const exprs = [...chartTemplate('prometheusrule.yaml').matchAll(/^\s*expr:\s*(.+)$/gm)].map((m) => m[1]!);
    expect(exprs.length).toBeGreaterThan(3);
    const missing = exprs.flatMap((e) =>
      metricNames(e)
        .filter((n) => !exported.has(n))
        .map((n) => `${n} in ${e}`),
    );
    expect(missing).toEqual([]);
  });
});
