// The one pino logger: JSON lines on stderr (stdout belongs to the child), or lines for a person
// on a terminal; secrets redacted either way.
import pino from 'pino';
import { redact } from './secrets.js';
import { humanLine } from './log-lines.js';

export type Logger = pino.Logger;

/** `json`: one JSON object a line (machines, files, journald); `pretty`: "time level message key=value". */
export type LogFormat = 'json' | 'pretty';

export function createLogger(level: string, secrets: readonly string[] = [], format: LogFormat = 'json'): Logger {
  // Synchronous so the last lines are written before the process exits with the child's code.
  const stderr = pino.destination({ fd: 2, sync: true });
  // A line that cannot be written (a full disk behind `2>>file`, /dev/full) is lost, never the
  // run: unheard, the stream's error event would be thrown from the log call, fail a run whose
  // child had succeeded, and leave its window to run again. stderr's errors cannot be reported
  // anywhere else (bin/leasejob.js ignores them likewise); the line is tried again with the next.
  stderr.on('error', () => {});
  return pino(
    {
      level,
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      // Last line of defence: whatever reaches a log line passes through redact().
      hooks: secrets.length
        ? {
            streamWrite: (line: string) => redact(line, secrets),
          }
        : {},
    },
    // The same JSON line, redacted, turned into a terminal line just before it is written.
    format === 'pretty' ? { write: (line: string) => stderr.write(humanLine(line)) } : stderr,
  );
}

// A no-op stream: pino's default would open a stdout writer at import, on every CLI start.
export const silentLogger: Logger = pino({ level: 'silent' }, { write: () => {} });
