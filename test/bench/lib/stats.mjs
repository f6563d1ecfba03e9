// Small statistics for the bench: quantiles (linear interpolation), a summary of samples, and
// the spread shown in the table (p10-p90 with 10 or more samples, else min-max).

/** @param {number[]} sorted ascending, non-empty @param {number} q in [0, 1] */
export function quantile(sorted, q) {
  if (sorted.length === 0) return NaN;
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

/** @param {number[]} samples */
export function summarize(samples) {
  const xs = samples.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (xs.length === 0) return { n: 0, median: NaN, p10: NaN, p90: NaN, min: NaN, max: NaN, mean: NaN };
  return {
    n: xs.length,
    median: quantile(xs, 0.5),
    p10: quantile(xs, 0.1),
    p90: quantile(xs, 0.9),
    min: xs[0],
    max: xs[xs.length - 1],
    mean: xs.reduce((a, b) => a + b, 0) / xs.length,
  };
}

/** The spread the table shows, and what it is. */
export function spreadOf(s) {
  if (s.n >= 10) return { kind: 'p10-p90', lo: s.p10, hi: s.p90 };
  return { kind: 'min-max', lo: s.min, hi: s.max };
}

/** Median of per-pair ratios a[i]/b[i] (pairs from the same iteration), and of differences. */
export function paired(a, b) {
  const n = Math.min(a.length, b.length);
  const ratios = [];
  const diffs = [];
  for (let i = 0; i < n; i++) {
    if (!Number.isFinite(a[i]) || !Number.isFinite(b[i])) continue;
    if (b[i] !== 0) ratios.push(a[i] / b[i]);
    diffs.push(a[i] - b[i]);
  }
  return { ratio: summarize(ratios), diff: summarize(diffs) };
}

/** Rotate a list by i (iteration i runs every contender once, starting at a different one). */
export function rotate(list, i) {
  const k = ((i % list.length) + list.length) % list.length;
  return [...list.slice(k), ...list.slice(0, k)];
}

/** Number formatting for the table: ms with sensible precision. */
export function fmt(x, unit = 'ms') {
  if (x === undefined || x === null || Number.isNaN(x)) return '-';
  if (unit === 'MB') return x.toFixed(1);
  if (unit === 'x') return x.toFixed(2);
  if (unit === 'count' || unit === 'stmts') return Number.isInteger(x) ? String(x) : x.toFixed(2);
  if (Math.abs(x) >= 100) return x.toFixed(0);
  if (Math.abs(x) >= 10) return x.toFixed(1);
  return x.toFixed(2);
}
