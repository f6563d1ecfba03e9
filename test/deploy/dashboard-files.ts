// The Grafana dashboard as data: where it is, its JSON model's shape as the tests read it, and
// its PromQL queries.
import path from 'node:path';
import { ROOT } from '../helpers/wait.js';

/** The dashboard's one source; the chart carries a copy. */
export const DASHBOARD_FILE = path.join(ROOT, 'deploy', 'grafana', 'leasejob.json');

export interface Target { expr: string; refId: string; datasource: { type: string; uid: string } }
export interface Panel { id: number; type: string; title: string; gridPos: { x: number; y: number; w: number; h: number }; datasource?: { type: string; uid: string }; targets?: Target[] }
export interface Dashboard { uid: string; title: string; schemaVersion: number; panels: Panel[]; templating: { list: Array<{ name: string; type: string; query: string | { query: string } }> } }

/** Every PromQL query of the dashboard: panel targets and variable queries. */
export function dashboardQueries(d: Dashboard): string[] {
  const vars = d.templating.list.filter((v) => v.type === 'query').map((v) => (typeof v.query === 'string' ? v.query : v.query.query));
  return [...d.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr)), ...vars];
}

