// The chart's alert rules proven with Prometheus's own tools: the PrometheusRule `helm template`
// renders passes `promtool check rules`, and `promtool test rules` shows each alert firing on
// the series it is for and staying quiet otherwise. Every alert the chart renders must have
// both kinds of case below: a new alert fails this file until it has them.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findTool, renderRuleSpec, type PromRule as Rule } from './deploy-files.js';

const helm = findTool('helm', 'LEASEJOB_HELM');
const promtool = findTool('promtool', 'LEASEJOB_PROMTOOL', ['--version']);
if (!helm) console.log('skipping the promtool checks of the alert rules: no helm on PATH (set LEASEJOB_HELM to use one)');
if (!promtool) console.log('skipping the promtool checks of the alert rules: no promtool on PATH (apt-get install prometheus, or set LEASEJOB_PROMTOOL)');

const NAMESPACE = 'billing';
const RELEASE = 'rel';
/** What the rules select: this release's exporter, as prometheus-operator labels its targets. */
const TARGET = { namespace: NAMESPACE, service: `${RELEASE}-leasejob-exporter`, instance: '10.0.0.7:9464', pod: 'rel-leasejob-exporter-0' };
const OTHER_RELEASE = { ...TARGET, service: 'other-leasejob-exporter' };

interface Series { metric: string; labels?: Record<string, string>; values: string; target?: Record<string, string> }
interface AlertCase {
  alert: string;
  /** What the case shows, for the test's name. */
  what: string;
  series: Series[];
  evalTime: string;
  /** The labels of each alert expected at evalTime (beside the rule's own); [] for none. */
  fires: Array<Record<string, string>>;
  /** The text `{{ $value | ... }}` renders to in the annotations, where they use the value. */
  valueText?: string;
}

/** One series in promtool's notation: metric{labels} over the target's labels. */
function seriesText(s: Series): string {
  const labels = { ...(s.target ?? TARGET), ...s.labels };
  return `${s.metric}{${Object.entries(labels).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(',')}}`;
}

// The cases, alert by alert: each fires on the series it is for, and stays quiet on the ones it
// is not (below its threshold, not for long enough, another release's exporter).
const CASES: AlertCase[] = [
  { alert: 'LeasejobRunFailed', what: 'a failed run, at the first evaluation that sees it', evalTime: '3m',
    series: [{ metric: 'leasejob_failed_occurrences', labels: { job: 'daily1' }, values: '0 0 0 1 1' }, { metric: 'leasejob_failed_occurrences', labels: { job: 'hourly' }, values: '0x5' }],
    fires: [{ namespace: NAMESPACE, job: 'daily1' }] },
  { alert: 'LeasejobRunFailed', what: 'a failed run redone (back to 0)', evalTime: '10m',
    series: [{ metric: 'leasejob_failed_occurrences', labels: { job: 'daily1' }, values: '1x5 0x10' }], fires: [] },
  { alert: 'LeasejobRunFailed', what: 'a failed run in another release', evalTime: '10m',
    series: [{ metric: 'leasejob_failed_occurrences', labels: { job: 'daily1' }, values: '1x15', target: OTHER_RELEASE }], fires: [] },

  { alert: 'LeasejobDueOccurrencesNotCompleted', what: 'a stopped job: the latest occurrence past its grace, at the first evaluation', evalTime: '3m',
    series: [
      { metric: 'leasejob_due_occurrences_not_completed', labels: { job: 'nightly-close' }, values: '0 0 0 1 1' },
      { metric: 'leasejob_failed_occurrences', labels: { job: 'nightly-close' }, values: '0x5' },
      { metric: 'leasejob_due_occurrences_not_completed', labels: { job: 'hourly' }, values: '0x5' },
      { metric: 'leasejob_failed_occurrences', labels: { job: 'hourly' }, values: '0x5' },
    ],
    fires: [{ namespace: NAMESPACE, job: 'nightly-close' }] },
  { alert: 'LeasejobDueOccurrencesNotCompleted', what: 'an earlier occurrence no host ran, the latest completed', evalTime: '10m',
    series: [
      { metric: 'leasejob_due_occurrences_not_completed', labels: { job: 'minutely' }, values: '1x15' },
      { metric: 'leasejob_failed_occurrences', labels: { job: 'minutely' }, values: '0x15' },
    ],
    fires: [{ namespace: NAMESPACE, job: 'minutely' }] },
  { alert: 'LeasejobDueOccurrencesNotCompleted', what: 'a failed run past its grace (LeasejobRunFailed\'s: one page per cause)', evalTime: '10m',
    series: [
      { metric: 'leasejob_due_occurrences_not_completed', labels: { job: 'nightly-close' }, values: '1x15' },
      { metric: 'leasejob_failed_occurrences', labels: { job: 'nightly-close' }, values: '1x15' },
    ], fires: [] },
  { alert: 'LeasejobDueOccurrencesNotCompleted', what: 'an occurrence rerun (the count back to 0)', evalTime: '10m',
    series: [
      { metric: 'leasejob_due_occurrences_not_completed', labels: { job: 'nightly-close' }, values: '1x5 0x10' },
      { metric: 'leasejob_failed_occurrences', labels: { job: 'nightly-close' }, values: '0x15' },
    ], fires: [] },
  { alert: 'LeasejobDueOccurrencesNotCompleted', what: 'an occurrence not completed in another release', evalTime: '10m',
    series: [
      { metric: 'leasejob_due_occurrences_not_completed', labels: { job: 'nightly-close' }, values: '2x15', target: OTHER_RELEASE },
      { metric: 'leasejob_failed_occurrences', labels: { job: 'nightly-close' }, values: '0x15', target: OTHER_RELEASE },
    ], fires: [] },

  { alert: 'LeasejobDurationUnexpected', what: 'a run outside --expect-duration, at the first evaluation', evalTime: '3m',
    series: [{ metric: 'leasejob_duration_outside_expected', labels: { job: 'too-short' }, values: '0 0 0 1 1' }, { metric: 'leasejob_duration_outside_expected', labels: { job: 'fine' }, values: '0x5' }],
    fires: [{ namespace: NAMESPACE, job: 'too-short' }] },
  { alert: 'LeasejobDurationUnexpected', what: 'runs within their bounds', evalTime: '10m',
    series: [{ metric: 'leasejob_duration_outside_expected', labels: { job: 'fine' }, values: '0x15' }], fires: [] },

  { alert: 'LeasejobDurationNearInterval', what: 'a run that took 60% of its interval', evalTime: '3m',
    series: [{ metric: 'leasejob_duration_interval_ratio', labels: { job: 'slow' }, values: '0.2 0.2 0.2 0.6 0.6' }],
    fires: [{ namespace: NAMESPACE, job: 'slow' }], valueText: '60%' },
  { alert: 'LeasejobDurationNearInterval', what: 'a run within half its interval', evalTime: '10m',
    series: [{ metric: 'leasejob_duration_interval_ratio', labels: { job: 'quick' }, values: '0.5x15' }], fires: [] },

  { alert: 'LeasejobLeaseHeldTooLong', what: 'a lease held beyond the threshold', evalTime: '20m',
    series: [{ metric: 'leasejob_lease_held_seconds', labels: { job: 'stuck' }, values: '21000+60x25' }],
    fires: [{ namespace: NAMESPACE, job: 'stuck' }], valueText: '6h 10m 0s' },
  { alert: 'LeasejobLeaseHeldTooLong', what: 'a long run below the threshold', evalTime: '20m',
    series: [{ metric: 'leasejob_lease_held_seconds', labels: { job: 'long' }, values: '18000+60x25' }], fires: [] },

  { alert: 'LeasejobLeaseLost', what: 'a lease lost within the window', evalTime: '10m',
    series: [{ metric: 'leasejob_leases_lost_total', labels: { job: 'flaky-net' }, values: '0 0 0 1 1 1 1 1 1 1 1 1' }],
    fires: [{ namespace: NAMESPACE, job: 'flaky-net' }] },
  { alert: 'LeasejobLeaseLost', what: 'old losses that are not new (a counter that stays put)', evalTime: '10m',
    series: [{ metric: 'leasejob_leases_lost_total', labels: { job: 'flaky-net' }, values: '3x12' }], fires: [] },

  { alert: 'LeasejobNotifyFailures', what: 'a job\'s first failed ping (its series is 0 from registration)', evalTime: '10m',
    series: [{ metric: 'leasejob_notify_failures_total', labels: { job: 'nightly-close' }, values: '0 0 0 1 1 1 1 1 1 1 1 1' }],
    fires: [{ namespace: NAMESPACE, job: 'nightly-close' }] },
  { alert: 'LeasejobNotifyFailures', what: 'old failures that are not new', evalTime: '10m',
    series: [{ metric: 'leasejob_notify_failures_total', labels: { job: 'nightly-close' }, values: '2x12' }], fires: [] },

  { alert: 'LeasejobClockOffset', what: 'a host clock 2.5s off, measured to 0.1s', evalTime: '20m',
    series: [
      { metric: 'leasejob_clock_offset_seconds', labels: { host: 'cron-2' }, values: '-2.5x25' },
      { metric: 'leasejob_clock_offset_uncertainty_seconds', labels: { host: 'cron-2' }, values: '0.1x25' },
    ],
    fires: [{ namespace: NAMESPACE, host: 'cron-2' }], valueText: '2.4' },
  { alert: 'LeasejobClockOffset', what: 'a large offset within its uncertainty (a slow round trip is no skew)', evalTime: '20m',
    series: [
      { metric: 'leasejob_clock_offset_seconds', labels: { host: 'cron-2' }, values: '2.5x25' },
      { metric: 'leasejob_clock_offset_uncertainty_seconds', labels: { host: 'cron-2' }, values: '1x25' },
    ], fires: [] },

  { alert: 'LeasejobReplicationStandby', what: 'the exporter reaching a standby for longer than `for`', evalTime: '10m',
    series: [{ metric: 'leasejob_replication_mode', labels: { mode: 'standby' }, values: '1x15' }], fires: [{ namespace: NAMESPACE }] },
  { alert: 'LeasejobReplicationStandby', what: 'a primary (a standby seen only during a failover, shorter than `for`)', evalTime: '10m',
    series: [
      { metric: 'leasejob_replication_mode', labels: { mode: 'standby' }, values: '1x2 _x13' },
      { metric: 'leasejob_replication_mode', labels: { mode: 'single' }, values: '_x2 1x13' },
    ], fires: [] },

  { alert: 'LeasejobReplicationAsynchronous', what: 'asynchronous standbys only, for longer than `for`', evalTime: '20m',
    series: [{ metric: 'leasejob_replication_mode', labels: { mode: 'asynchronous' }, values: '1x25' }], fires: [{ namespace: NAMESPACE }] },
  { alert: 'LeasejobReplicationAsynchronous', what: 'synchronous replication', evalTime: '20m',
    series: [{ metric: 'leasejob_replication_mode', labels: { mode: 'synchronous' }, values: '1x25' }], fires: [] },
  { alert: 'LeasejobReplicationAsynchronous', what: 'asynchronous in another release', evalTime: '20m',
    series: [{ metric: 'leasejob_replication_mode', labels: { mode: 'asynchronous' }, values: '1x25', target: OTHER_RELEASE }], fires: [] },

  { alert: 'LeasejobExporterDown', what: 'an exporter that cannot reach the database', evalTime: '10m',
    series: [{ metric: 'leasejob_up', values: '0x15' }], fires: [{ namespace: NAMESPACE, service: TARGET.service }] },
  { alert: 'LeasejobExporterDown', what: 'an exporter that reaches it', evalTime: '10m', series: [{ metric: 'leasejob_up', values: '1x15' }], fires: [] },

  { alert: 'LeasejobExporterAbsent', what: 'no exporter scraped (only another release\'s)', evalTime: '10m',
    series: [{ metric: 'leasejob_up', values: '1x15', target: OTHER_RELEASE }], fires: [{ namespace: NAMESPACE, service: TARGET.service }] },
  { alert: 'LeasejobExporterAbsent', what: 'the exporter scraped, even while it cannot reach the database', evalTime: '10m',
    series: [{ metric: 'leasejob_up', values: '0x15' }], fires: [] },
];

/** An annotation as Prometheus expands it, for the few template forms the chart uses. */
function expand(template: string, labels: Record<string, string>, valueText: string | undefined): string {
  return template.replace(/\{\{\s*([^}]*?)\s*\}\}/g, (all, inner: string) => {
    const label = /^\$labels\.(\w+)$/.exec(inner);
    if (label) return labels[label[1]!] ?? '';
    if (/^\$value\b/.test(inner)) {
      if (valueText === undefined) throw new Error(`an annotation uses the value (${all}): give the case a valueText`);
      return valueText;
    }
    throw new Error(`an annotation template this test cannot expand: ${all}`);
  });
}

describe.skipIf(!helm || !promtool)('alert rules under promtool', () => {
  let dir: string;
  let rulesFile: string;
  let alerts: Map<string, Rule>;

  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'leasejob-promtool-'));
    const spec = renderRuleSpec(helm!, { release: RELEASE, namespace: NAMESPACE });
    // A PrometheusRule's spec is a Prometheus rules file.
    rulesFile = path.join(dir, 'rules.yaml');
    writeFileSync(rulesFile, stringify(spec));
    alerts = new Map(spec.groups.flatMap((g) => g.rules).filter((x) => x.alert).map((x) => [x.alert!, x]));
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('promtool check rules passes on what the chart renders', () => {
    const r = spawnSync(promtool!, ['check', 'rules', rulesFile], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/SUCCESS: \d+ rules found/);
  });

  it('prometheusRule.replicationAsynchronous.enabled=false leaves that alert out, and only it', () => {
    const spec = renderRuleSpec(helm!, { release: RELEASE, namespace: NAMESPACE, set: ['prometheusRule.replicationAsynchronous.enabled=false'] });
    const names = spec.groups.flatMap((g) => g.rules).map((x) => x.alert);
    expect(names).toEqual([...alerts.keys()].filter((n) => n !== 'LeasejobReplicationAsynchronous'));
  });

  it('every alert the chart renders has a case where it fires and one where it stays quiet', () => {
    for (const name of alerts.keys()) {
      const mine = CASES.filter((c) => c.alert === name);
      expect(mine.some((c) => c.fires.length > 0), `${name}: a case where it fires`).toBe(true);
      expect(mine.some((c) => c.fires.length === 0), `${name}: a case where it stays quiet`).toBe(true);
    }
    expect(CASES.filter((c) => !alerts.has(c.alert)).map((c) => c.alert), 'cases for alerts the chart no longer has').toEqual([]);
  });

  it.each(CASES.map((c) => [`${c.alert}: ${c.fires.length ? 'fires on' : 'quiet on'} ${c.what}`, c] as const))('promtool test rules: %s', (_name, c) => {
    const rule = alerts.get(c.alert);
    expect(rule, `the chart renders ${c.alert}`).toBeDefined();
    const test = {
      rule_files: [rulesFile],
      evaluation_interval: '1m',
      tests: [{
        interval: '1m',
        input_series: c.series.map((s) => ({ series: seriesText(s), values: s.values })),
        alert_rule_test: [{
          eval_time: c.evalTime,
          alertname: c.alert,
          exp_alerts: c.fires.map((labels) => {
            const all = { ...rule!.labels, ...labels };
            return { exp_labels: all, exp_annotations: Object.fromEntries(Object.entries(rule!.annotations ?? {}).map(([k, v]) => [k, expand(v, all, c.valueText)])) };
          }),
        }],
      }],
    };
    const file = path.join(dir, `${c.alert}-${CASES.indexOf(c)}.test.yaml`);
    writeFileSync(file, stringify(test));
    const r = spawnSync(promtool!, ['test', 'rules', file], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stdout + r.stderr).toBe(0);
  });
});
