// Plain-text tables for status and history: padded columns, no dependencies.

export function renderTable(headers: string[], rows: string[][]): string {
  // Loops, not Math.max(...column): a spread of 100,000 cells would exceed the argument limit.
  const widths = headers.map((h) => h.length);
  for (const r of rows) {
    for (let i = 0; i < widths.length; i++) widths[i] = Math.max(widths[i]!, (r[i] ?? '').length);
  }
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  const lines = [line(headers)];
  for (const r of rows) lines.push(line(r));
  return lines.join('\n') + '\n';
}

// Durations as status shows them; beside the parsing of durations (store/retention.ts says them too).
export { humanMs } from '../schedule/duration.js';
