// Collects results, prints the table and writes the JSON.
import { writeFileSync } from 'node:fs';
import { fmt, paired, spreadOf, summarize } from './stats.mjs';

export class Report {
  constructor() {
    /** @type {any[]} */
    this.rows = [];
    /** @type {string[]} */
    this.notes = [];
    /** @type {Record<string, unknown>} */
    this.extra = {};
  }

  /**
   * @param {{ bench: string, name: string, unit: string, samples: number[],
   *   baseline?: { name: string, samples: number[], paired?: boolean },
   *   target?: { text: string, ok?: boolean }, note?: string, raw?: unknown }} r
   */
  add(r) {
    const summary = summarize(r.samples);
    const row = { bench: r.bench, name: r.name, unit: r.unit, samples: r.samples, summary, spread: spreadOf(summary) };
    if (r.baseline) {
      const b = summarize(r.baseline.samples);
      row.baseline = { name: r.baseline.name, samples: r.baseline.samples, summary: b, spread: spreadOf(b) };
      row.ratio = b.median ? summary.median / b.median : NaN;
      if (r.baseline.paired !== false) {
        const p = paired(r.samples, r.baseline.samples);
        row.pairedRatio = p.ratio;
        row.pairedDiff = p.diff;
      }
    }
    // A target is met only by what was measured: a row whose trials all failed (no finite
    // sample) reads NO, whatever the bench's own check said of an empty list.
    if (r.target)
      row.target =
        summary.n > 0
          ? r.target
          : { text: r.target.text, ok: r.target.ok === undefined ? undefined : false, unmeasured: true };
    if (r.note) row.note = r.note;
    if (r.raw !== undefined) row.raw = r.raw;
    this.rows.push(row);
    return row;
  }

  note(text) {
    this.notes.push(text);
  }

  table() {
    const head = [
      'bench',
      'measurement',
      'n',
      'median',
      'spread',
      'unit',
      'baseline',
      'base median',
      'base spread',
      'ratio',
      'target',
      'ok',
    ];
    const body = this.rows.map((r) => [
      r.bench,
      r.name,
      String(r.summary.n),
      fmt(r.summary.median, r.unit),
      `${fmt(r.spread.lo, r.unit)}-${fmt(r.spread.hi, r.unit)}`,
      r.unit,
      r.baseline?.name ?? '',
      r.baseline ? fmt(r.baseline.summary.median, r.unit) : '',
      r.baseline ? `${fmt(r.baseline.spread.lo, r.unit)}-${fmt(r.baseline.spread.hi, r.unit)}` : '',
      r.baseline ? `${fmt(r.ratio, 'x')}x` : '',
      r.target?.text ?? '',
      r.target?.ok === undefined ? '' : r.target.ok ? 'yes' : r.target.unmeasured ? 'NO (nothing measured)' : 'NO',
    ]);
    const widths = head.map((h, i) => Math.max(h.length, ...body.map((row) => row[i].length)));
    const line = (cells) =>
      cells
        .map((c, i) =>
          (i >= 2 && i <= 4) || i === 7 || i === 8 || i === 9 ? c.padStart(widths[i]) : c.padEnd(widths[i]),
        )
        .join('  ')
        .trimEnd();
    const out = [line(head), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)];
    out.push(
      '',
      'spread: p10-p90 when n >= 10, else min-max; ratio: median / baseline median (paired per-iteration ratios and differences are in the JSON).',
    );
    for (const r of this.rows) if (r.note) out.push(`- ${r.bench} / ${r.name}: ${r.note}`);
    for (const n of this.notes) out.push(`- ${n}`);
    return out.join('\n');
  }

  write(file, meta) {
    const round = (x) => (typeof x === 'number' && !Number.isInteger(x) ? Math.round(x * 1000) / 1000 : x);
    const json = JSON.stringify({ meta, results: this.rows, notes: this.notes, ...this.extra }, (_k, v) => round(v), 2);
    writeFileSync(file, json + '\n');
  }
}
