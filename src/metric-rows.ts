// Metric families of one series per job (10,000 jobs: 92,000 series), rendered in the
// Prometheus text format directly from rows. prom-client renders the same text (a unit test
// compares the two byte for byte) but through several arrays and strings per series: 100 of
// a 318 ms scrape, against 35-50 ms here. The exporter's other metrics stay prom-client's.

export type Labels = Record<string, string>;

/** prom-client's escaping: backslash and newline in HELP and label values, quotes in values. */
function escapeLabelValue(v: string): string {
  return /[\\"\n]/.test(v) ? v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"') : v;
}

/** prom-client's number format: NaN as 'Nan' (sic), infinities as +Inf/-Inf. */
function valueText(v: number): string {
  if (Number.isNaN(v)) return 'Nan';
  if (!Number.isFinite(v)) return v < 0 ? '-Inf' : '+Inf';
  return `${v}`;
}

export class MetricRows {
  private rows: Array<{ labels: Labels; value: number }> = [];
  /** Rows added with a key, so that later additions with that key sum into them. */
  private keyed = new Map<string, { labels: Labels; value: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'gauge' | 'counter',
  ) {}

  add(labels: Labels, value: number): void {
    this.rows.push({ labels, value });
  }

  /** Add n to the series under `key` (first added with these labels), for counts to sum. */
  addTo(key: string, labels: Labels, n: number): void {
    const row = this.keyed.get(key);
    if (row) {
      row.value += n;
      return;
    }
    const created = { labels, value: n };
    this.keyed.set(key, created);
    this.rows.push(created);
  }

  reset(): void {
    this.rows = [];
    this.keyed.clear();
  }

  /** HELP, TYPE, then a line per series, without a trailing newline (as prom-client). */
  render(): string {
    const name = this.name;
    let out = `# HELP ${name} ${this.help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}\n# TYPE ${name} ${this.type}`;
    for (const { labels, value } of this.rows) {
      let l = '';
      for (const k in labels) l += `${l ? ',' : ''}${k}="${escapeLabelValue(labels[k]!)}"`;
      out += `\n${name}${l ? `{${l}}` : ''} ${valueText(value)}`;
    }
    return out;
  }
}
