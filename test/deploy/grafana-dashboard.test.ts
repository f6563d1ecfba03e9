// The Grafana dashboard (deploy/grafana/leasejob.json): a well-formed classic dashboard JSON
// model with the panels the operator needs, the chart's copy identical to it, and the chart's
// ConfigMap that Grafana's sidecar loads. test/integration/dashboard-metrics.test.ts checks
// its metric names against a real exporter.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { CHART_DIR, DATABASE_SET, findTool, parseDocuments, type K8sObject } from './deploy-files.js';
import { DASHBOARD_FILE, dashboardQueries, type Dashboard } from './dashboard-files.js';
import { labelValuesMetric, metricNames } from './promql-names.js';

const text = readFileSync(DASHBOARD_FILE, 'utf8');
const dashboard = JSON.parse(text) as Dashboard;

describe('deploy/grafana/leasejob.json', () => {
  it('is a classic dashboard: a fixed uid, a Prometheus datasource variable every query uses, unique panel ids, on the 24-column grid', () => {
    expect(dashboard).toMatchObject({ uid: 'leasejob-overview', title: 'leasejob' });
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    expect(dashboard.templating.list.find((v) => v.name === 'datasource')).toMatchObject({ type: 'datasource', query: 'prometheus' });
    const ids = dashboard.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const p of dashboard.panels) {
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
      if (p.type === 'row') continue;
      expect(p.datasource, p.title).toEqual({ type: 'prometheus', uid: '${datasource}' });
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      for (const t of p.targets!) {
        expect(t.datasource, p.title).toEqual({ type: 'prometheus', uid: '${datasource}' });
        expect(t.expr, p.title).toMatch(/leasejob_/);
      }
      expect(new Set(p.targets!.map((t) => t.refId)).size, p.title).toBe(p.targets!.length);
    }
  });

  it('has the panels an operator looks for', () => {
    const titles = dashboard.panels.map((p) => p.title);
    for (const t of ['Overdue jobs', 'Runs by outcome', 'Lease losses', 'Stale takeovers', 'Renewal failures', 'Fence refusals', 'Duration against the interval', 'Clock offset by host',
      'Due occurrences not completed', 'Paused jobs', 'Done skips', 'Notify failures', 'Replication mode', 'Fence epoch']) {
      expect(titles).toContain(t);
    }
  });

  it('names metrics in every query (the parser finds them, so the comparison with the exporter cannot pass empty)', () => {
    const names = dashboardQueries(dashboard).flatMap((q) => labelValuesMetric(q) ?? metricNames(q));
    expect(new Set(names)).toContain('leasejob_window_overdue');
    expect(metricNames('sum by (job) (increase(leasejob_runs_total{job=~"$job"}[$__rate_interval])) and on (job) up == 1')).toEqual(['leasejob_runs_total', 'up']);
  });

  it('the chart carries an identical copy', () => {
    expect(readFileSync(path.join(CHART_DIR, 'dashboards', 'leasejob.json'), 'utf8')).toBe(text);
  });
});

const helm = findTool('helm', 'LEASEJOB_HELM');
describe.skipIf(!helm)('the chart\'s dashboard ConfigMap (helm template)', () => {
  const render = (...set: string[]): K8sObject[] => {
    const r = spawnSync(helm!, ['template', 'rel', CHART_DIR, '--namespace', 'billing', '--kube-version', '1.27.0', ...[DATABASE_SET, ...set].flatMap((s) => ['--set', s])], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    return parseDocuments(r.stdout, 'helm template') as K8sObject[];
  };

  it('is off by default', () => {
    expect(render().filter((o) => o.kind === 'ConfigMap')).toEqual([]);
  });

  it('on, it holds the dashboard under the sidecar\'s label, in another namespace and with annotations when asked', () => {
    const [cm] = render('grafanaDashboard.enabled=true').filter((o) => o.kind === 'ConfigMap') as Array<K8sObject & { data: Record<string, string> }>;
    expect(cm!.metadata.name).toBe('rel-leasejob-dashboard');
    expect(cm!.metadata.labels).toMatchObject({ grafana_dashboard: '1', 'app.kubernetes.io/instance': 'rel' });
    expect(cm!.metadata.namespace).toBeUndefined();
    expect(JSON.parse(cm!.data['leasejob.json']!)).toEqual(dashboard);
    const [other] = render('grafanaDashboard.enabled=true', 'grafanaDashboard.namespace=monitoring', 'grafanaDashboard.label=dash', 'grafanaDashboard.labelValue=yes', 'grafanaDashboard.annotations.grafana_folder=Jobs')
      .filter((o) => o.kind === 'ConfigMap');
    expect(other!.metadata).toMatchObject({ namespace: 'monitoring', labels: { dash: 'yes' }, annotations: { grafana_folder: 'Jobs' } });
    expect(other!.metadata.labels).not.toHaveProperty('grafana_dashboard');
  });
});

const promtool = findTool('promtool', 'LEASEJOB_PROMTOOL', ['--version']);
describe.skipIf(!promtool)('the dashboard\'s queries under promtool', () => {
  it('every panel query is valid PromQL once Grafana\'s variables are filled in (checked as recording rules)', () => {
    const fill = (q: string): string => q.replace(/\$__rate_interval/g, '5m').replace(/\$\{?\w+\}?/g, '.*');
    const exprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    const rules = { groups: [{ name: 'dashboard', rules: exprs.map((e, i) => ({ record: `leasejob:dashboard_query_${i}`, expr: fill(e) })) }] };
    const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-dash-'));
    try {
      const file = path.join(dir, 'queries.yaml');
      writeFileSync(file, stringify(rules));
      const r = spawnSync(promtool!, ['check', 'rules', file], { encoding: 'utf8', timeout: 60_000 });
      expect(r.status, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toContain(`SUCCESS: ${exprs.length} rules found`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
