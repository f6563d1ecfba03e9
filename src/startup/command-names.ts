// The CLI's commands: what src/cli/main.ts defines, and what the code-cache loader (src/startup/compile-cache.ts,
// which runs before the bundle) names its cache files after.
export const COMMANDS: ReadonlySet<string> = new Set([
  'run',
  'migrate',
  'status',
  'history',
  'check',
  'exporter',
  'release',
  'pause',
  'resume',
  'mark',
  'backfill',
  'prune',
]);
