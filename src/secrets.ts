// Secrets kept out of what leasejob prints: a known secret replaced wherever a message carries it,
// and passwords masked in text that may hold a connection string. No connection parsing here.
const patterns = new Map<string, RegExp>();

/** From this length a password is replaced wherever it appears: no word of a log line is one. */
const ANYWHERE_FROM = 12;

/**
 * The secret as a whole word: not where it is only part of a longer one. A password `postgres`
 * is hidden in `postgres://u:postgres@h`, but `"store":"postgresql"` stays readable (a plain
 * replace made it `"***ql"`, and `x` turned `exporter` into `e***porter`, which both mangled
 * the line and showed where the password's letters are). An edge that is not a letter, digit or
 * underscore needs no boundary; an escape before it (`\n`, `\u00e9`, `%3A` in an encoded URL)
 * counts as one. A long password is hidden wherever it appears.
 */
function patternOf(secret: string): RegExp {
  let p = patterns.get(secret);
  if (p === undefined) {
    const body = secret.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const whole = secret.length < ANYWHERE_FROM;
    const before = whole && /^\w/.test(secret) ? '(?<=^|\\W|\\\\[nrtbf]|\\\\u[0-9a-fA-F]{4}|%[0-9a-fA-F]{2})' : '';
    const after = whole && /\w$/.test(secret) ? '(?!\\w)' : '';
    p = new RegExp(`${before}${body}${after}`, 'g');
    patterns.set(secret, p);
  }
  return p;
}

export function redact(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) if (out.includes(s)) out = out.replace(patternOf(s), '***');
  return out;
}

/**
 * Text with every password written as a connection string may write one masked: the password
 * of a URL's user info (`postgres://u:***@h`) and a libpq `password=` value. For what leasejob
 * echoes before it knows which argument is a connection string: the argument parser's errors
 * (`--databaseurl=postgres://u:secret@h` is an unknown option) and usage errors.
 */
export function maskPasswords(text: string): string {
  return (
    text
      // To the last @ before the host: pg takes `postgres://u:p@ss@h/db` as password p@ss.
      .replace(/([a-z][a-z0-9+.-]*:\/\/[^\s:/@]*):[^\s/]*@/gi, '$1:***@')
      // libpq's secret keywords (password, sslpassword, oauth_client_secret, scram_client_key,
      // ...), their value quoted or up to the next unescaped space, as libpq reads it.
      .replace(/(\b\w*(?:password|secret|_key)\s*=\s*)('(?:[^'\\]|\\.)*'?|(?:\\.|[^\s\\])+)/gi, '$1***')
  );
}
