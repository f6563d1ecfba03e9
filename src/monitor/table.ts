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

/** 93s -> "1m33s", negative -> "-1m33s"; null -> "-". */
export function humanMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '-';
  const sign = ms < 0 ? '-' : '';
  let rest = Math.round(Math.abs(ms) / 1000);
  const d = Math.floor(rest / 86400);
  rest %= 86400;
  const h = Math.floor(rest / 3600);
  rest %= 3600;
  const m = Math.floor(rest / 60);
  const s = rest % 60;
  const parts = [d ? `${d}d` : '', h ? `${h}h` : '', m ? `${m}m` : '', s || (!d && !h && !m) ? `${s}s` : ''];
  return sign + parts.join('');
}
