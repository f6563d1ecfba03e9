// The one pino logger: JSON lines on stderr (stdout belongs to the child), secrets redacted.
import pino from 'pino';
import { redact } from './db.js';

export type Logger = pino.Logger;

export function createLogger(level: string, secrets: readonly string[] = []): Logger {
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
    // Synchronous so the last lines are written before the process exits with the child's code.
    pino.destination({ fd: 2, sync: true }),
  );
}

// A no-op stream: pino's default would open a stdout writer at import, on every CLI start.
export const silentLogger: Logger = pino({ level: 'silent' }, { write: () => {} });
