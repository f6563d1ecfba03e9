// Human log lines for a terminal: pino's JSON line turned into "time level message key=value".
// A small formatter rather than pino-pretty: it adds nothing to start-up (see the commit that
// added it for the figure) and keeps one pino logger writing synchronously to stderr.

/** Fields every line has, or that only a machine reads: left out of a terminal line. */
const QUIET = new Set([
  'level',
  'time',
  'msg',
  'pid',
  'hostname',
  'owner',
  'ttlMs',
  'offsetMs',
  'uncertaintyMs',
  'rttMs',
]);

const LEVELS: Record<string, string> = {
  trace: 'TRACE',
  debug: 'DEBUG',
  info: 'INFO ',
  warn: 'WARN ',
  error: 'ERROR',
  fatal: 'FATAL',
};

/** A value as a reader wants it: strings bare unless they hold spaces, errors by their message. */
function show(value: unknown): string {
  if (typeof value === 'string') return /[\s"=]/.test(value) || value === '' ? JSON.stringify(value) : value;
  if (value && typeof value === 'object' && 'message' in value && typeof value.message === 'string') {
    return JSON.stringify(value.message);
  }
  return JSON.stringify(value);
}

/** "HH:MM:SS" on this host's clock, as a person beside it reads one. */
function clock(time: unknown): string {
  const d = typeof time === 'string' || typeof time === 'number' ? new Date(time) : new Date();
  const two = (n: number): string => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

/** One pino JSON line as a terminal line; anything that is not JSON passes through as it is. */
export function humanLine(json: string): string {
  let rec: Record<string, unknown>;
  try {
    rec = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const fields = Object.entries(rec)
    .filter(([k, v]) => !QUIET.has(k) && v !== null && v !== undefined)
    .map(([k, v]) => `${k}=${show(v)}`);
  const level = LEVELS[String(rec.level)] ?? String(rec.level).toUpperCase();
  return `${clock(rec.time)} ${level} ${String(rec.msg ?? '')}${fields.length ? '  ' + fields.join(' ') : ''}\n`;
}
