// The log level every command takes: --log-level, else LEASEJOB_LOG_LEVEL, else info. No
// imports beyond errors, so the CLI wiring can use the list without loading the logger.
import { UsageError } from '../errors.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

export function resolveLogLevel(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  // An empty variable is unset, as a chart's `value: ""` means.
  const level = flag ?? (env.LEASEJOB_LOG_LEVEL || undefined) ?? 'info';
  if (!(LOG_LEVELS as readonly string[]).includes(level)) {
    throw new UsageError(
      `Expected \`--log-level\` (or LEASEJOB_LOG_LEVEL) to be one of ${LOG_LEVELS.join(', ')}, got \`${level}\`.`,
    );
  }
  return level;
}
