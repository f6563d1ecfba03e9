// Metric families of one series per job (several series a job), rendered in the Prometheus
// text format directly from rows. prom-client renders the same text (a unit test compares the
// two byte for byte) but through several arrays and strings per series, which made it most of a
// large scrape (the monitor bench, docs/performance.md); here each job's label text is built once
// for all families. The exporter's other metrics stay prom-client's.

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

/** `{k="v",...}` as prom-client writes it, or '' without labels: built once per series key, shared by every family. */
export function labelText(labels: Labels): string {
  let l = '';
  for (const k in labels) l += `${l ? ',' : ''}${k}="${escapeLabelValue(labels[k]!)}"`;
  return l ? `{${l}}` : '';
}

export class MetricRows {
  // Parallel arrays: a row is a shared label string and an unboxed double, so 92,000 series
  // are two arrays instead of 92,000 objects for the garbage collector to copy.
  private labels: string[] = [];
  private values: number[] = [];
  /** Series added with a key, so that later additions with that key sum into them. */
  private keyed = new Map<string, number>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'gauge' | 'counter',
  ) {}

  /** One series; `labels` from labelText(). */
  add(labels: string, value: number): void {
    this.labels.push(labels);
    this.values.push(value);
  }

  /** Add n to the series under `key` (first added with these labels), for counts to sum. */
  addTo(key: string, labels: string, n: number): void {
    const i = this.keyed.get(key);
    if (i !== undefined) {
      this.values[i]! += n;
      return;
    }
    this.keyed.set(key, this.values.length);
    this.add(labels, n);
  }

  reset(): void {
    this.labels = [];
    this.values = [];
    this.keyed.clear();
  }

  /** HELP, TYPE, then a line per series, without a trailing newline (as prom-client). */
  render(): string {
    const name = this.name;
    const lines: string[] = new Array(this.values.length + 2);
    lines[0] = `# HELP ${name} ${this.help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}`;
    lines[1] = `# TYPE ${name} ${this.type}`;
    for (let i = 0; i < this.values.length; i++)
      lines[i + 2] = `${name}${this.labels[i]} ${valueText(this.values[i]!)}`;
    return lines.join('\n');
  }
}
