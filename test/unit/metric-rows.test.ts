// MetricRows renders what prom-client renders for the same series, byte for byte.
import { Counter, Gauge, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { labelText, MetricRows } from '../../src/monitor/metric-rows.js';

const tricky = ['plain-job', 'with "quotes"', 'back\\slash', 'new\nline', 'ünïcødé', '', 'a,b=c{d}'];
const values = [
  0,
  1,
  -2.5,
  1e21,
  1.5e-7,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  1796043404.886,
];

async function promClient(
  type: 'gauge' | 'counter',
  name: string,
  help: string,
  series: Array<[Record<string, string>, number]>,
  labelNames: string[],
): Promise<string> {
  const registry = new Registry();
  const metric =
    type === 'gauge'
      ? new Gauge({ name, help, labelNames, registers: [registry] })
      : new Counter({ name, help, labelNames, registers: [registry] });
  for (const [labels, v] of series) {
    if (metric instanceof Gauge) metric.set(labels, v);
    else metric.inc(labels, v);
  }
  return (await registry.metrics()).replace(/\n$/, '');
}

describe('MetricRows', () => {
  it('renders a gauge with one label exactly as prom-client, escapes and odd numbers included', async () => {
    const series: Array<[Record<string, string>, number]> = tricky.map((job, i) => [
      { job },
      values[i % values.length]!,
    ]);
    const rows = new MetricRows('leasejob_test_gauge', 'a help text with \\ and\nnewline', 'gauge');
    for (const [labels, v] of series) rows.add(labelText(labels), v);
    expect(rows.render()).toBe(
      await promClient('gauge', 'leasejob_test_gauge', 'a help text with \\ and\nnewline', series, ['job']),
    );
  });

  it('renders a counter with two labels exactly as prom-client', async () => {
    const series: Array<[Record<string, string>, number]> = tricky.map((job, i) => [{ job, host: `h"${i}` }, i * 3]);
    const rows = new MetricRows('leasejob_test_total', 'counted', 'counter');
    for (const [labels, v] of series) rows.add(labelText(labels), v);
    expect(rows.render()).toBe(await promClient('counter', 'leasejob_test_total', 'counted', series, ['job', 'host']));
  });

  it('sums addTo() under one key into one series, as prom-client sums inc() on the same labels', async () => {
    const rows = new MetricRows('leasejob_sum_total', 'summed', 'counter');
    const series: Array<[Record<string, string>, number]> = [
      [{ job: 'a' }, 2],
      [{ job: 'b' }, 1],
      [{ job: 'a' }, 3],
    ];
    for (const [labels, v] of series) rows.addTo(labels.job!, labelText(labels), v);
    expect(rows.render()).toBe(await promClient('counter', 'leasejob_sum_total', 'summed', series, ['job']));
    expect(rows.render()).toContain('leasejob_sum_total{job="a"} 5');
  });

  it('renders HELP and TYPE alone when there are no series, as prom-client; reset() empties it', async () => {
    const rows = new MetricRows('leasejob_empty', 'nothing yet', 'gauge');
    rows.add(labelText({ job: 'x' }), 1);
    rows.reset();
    expect(rows.render()).toBe(await promClient('gauge', 'leasejob_empty', 'nothing yet', [], ['job']));
  });
});
