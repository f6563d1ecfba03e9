// The metric names a PromQL expression reads, for the tests that compare what the dashboard and
// the alert rules query with what the exporter exports. Not a PromQL parser: enough for the
// expressions this repository writes (selectors, aggregations, functions, binary operators).

const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'inf', 'nan']);

export function metricNames(expr: string): string[] {
  let e = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""') // string literals
    .replace(/\{\{[\s\S]*?\}\}/g, '') // Helm/Go template actions
    .replace(/\{[^}]*\}/g, '') // label matchers
    .replace(/\[[^\]]*\]/g, '') // range and subquery selectors
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ''); // label lists
  e = e.replace(/\$\{?\w+\}?/g, ''); // dashboard variables ($__rate_interval, ${datasource})
  const names = new Set<string>();
  for (const m of e.matchAll(/(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?/g)) {
    const [, name, call] = m;
    if (call || KEYWORDS.has(name!.toLowerCase()) || /^\d/.test(name!)) continue;
    names.add(name!);
  }
  return [...names];
}

/** The metric of a Grafana `label_values(metric{...}, label)` variable query; undefined for other queries. */
export function labelValuesMetric(query: string): string | undefined {
  return /^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(query)?.[1];
}
