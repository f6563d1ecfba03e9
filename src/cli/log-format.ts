// The log format every command takes: --log-format, else LEASEJOB_LOG_FORMAT, else auto (lines
// for a person when stderr is a terminal, JSON otherwise). No imports beyond errors and tty.
import { isatty } from 'node:tty';
import { UsageError } from '../errors.js';

export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;

export function resolveLogFormat(
  flag: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
  stderrIsTerminal: () => boolean = () => isatty(2),
): 'json' | 'pretty' {
  // An empty variable is unset, as a chart's `value: ""` means.
  const format = flag ?? (env.LEASEJOB_LOG_FORMAT || undefined) ?? 'auto';
  if (!(LOG_FORMATS as readonly string[]).includes(format)) {
    throw new UsageError(
      `Expected \`--log-format\` (or LEASEJOB_LOG_FORMAT) to be one of ${LOG_FORMATS.join(', ')}, got \`${format}\`.`,
    );
  }
  if (format === 'auto') return stderrIsTerminal() ? 'pretty' : 'json';
  return format as 'json' | 'pretty';
}
