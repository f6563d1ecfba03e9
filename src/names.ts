// Validation of names that reach the database: job names and the schema identifier.
import { UsageError } from './errors.js';

/** Long enough for any real job name, short enough to index and to print on one line. */
export const MAX_NAME_LENGTH = 200;
// C0 and C1 control characters, DEL, and the Unicode line/paragraph separators: they would
// forge log lines or make `status` output lie about which job a line belongs to.
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;

export function validateName(
  value: string | undefined,
  flag = '--name',
  example = 'a job name like nightly-close',
): string {
  if (value === undefined || value.trim() === '') {
    throw new UsageError(
      `Expected \`${flag}\` to be ${example}, got ${value === undefined ? 'nothing' : value === '' ? 'an empty string' : 'only spaces'}.`,
    );
  }
  // `--name --rerun`: commander takes the next word as the value, whatever it is.
  if (value.startsWith('-'))
    throw new UsageError(
      `Expected \`${flag}\` to be ${example}, got the option \`${value}\`: give the name right after ` +
        `\`${flag}\` (a name never starts with -).`,
    );
  const problem = nameProblem(value);
  if (problem !== undefined) throw new UsageError(`Expected \`${flag}\` to ${problem.expected}, got ${problem.got}.`);
  return value;
}

/** What is wrong with a non-empty name or key, if anything: the rule broken and what was given. */
function nameProblem(value: string): { expected: string; got: string } | undefined {
  if (value.length > MAX_NAME_LENGTH)
    return { expected: `be at most ${MAX_NAME_LENGTH} characters`, got: `${value.length}` };
  if (CONTROL.test(value)) return { expected: 'contain no control characters', got: JSON.stringify(value) };
  if (value !== value.trim()) return { expected: 'have no leading or trailing spaces', got: JSON.stringify(value) };
  return undefined;
}

/** Same rules for a literal `--window` key. */
export function validateWindowKey(value: string): string {
  return validateName(value, '--window', 'a window key like 2026-11-30');
}

/** Same rules for the key a `--window-format` renders, reported against that flag. */
export function validateFormattedWindowKey(key: string, format: string): string {
  const problem = key.trim() === '' ? { expected: 'not be blank', got: JSON.stringify(key) } : nameProblem(key);
  if (problem !== undefined) {
    const got = key.length > MAX_NAME_LENGTH ? `one of ${problem.got} characters` : problem.got;
    throw new UsageError(
      `Expected \`--window-format\` to give a window key that would ${problem.expected}; \`${format}\` gives ${got} for this occurrence.`,
    );
  }
  return key;
}

// Lowercase unquoted-identifier rules: the schema name is the one identifier we put in SQL
// text (values are always parameters), so it must be beyond doubt.
const SCHEMA = /^[a-z_][a-z0-9_]{0,62}$/;

export function validateSchema(value: string): string {
  if (!SCHEMA.test(value)) {
    throw new UsageError(
      `Expected \`--schema\` to be a lowercase identifier like leasejob (letters, digits, _; at most ` +
        `63 characters), got ${value.length > 63 ? `one of ${value.length} characters` : JSON.stringify(value)}.`,
    );
  }
  return value;
}

export function quoteIdent(schema: string): string {
  return `"${validateSchema(schema)}"`;
}

/** A role name for `--grant-to`: quoted on the server with format(%I), so only length and
 * control characters matter; PostgreSQL truncates identifiers at 63 bytes. */
export function validateRole(value: string): string {
  if (value === '' || Buffer.byteLength(value) > 63 || CONTROL.test(value)) {
    throw new UsageError(
      `Expected \`--grant-to\` to be an existing role name (1-63 bytes, no control characters), got ${JSON.stringify(value)}.`,
    );
  }
  return value;
}

/** The chart's job names: a DNS label that leaves room for the CronJob's prefix (helm/leasejob). */
const KUBERNETES_JOB_NAME = /^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$/;

/**
 * For a job name that could not be the chart's `jobs[].name` (a DNS label), one that could be,
 * to give beside it as `jobs[].leaseName`; undefined when the name is one already.
 */
export function kubernetesNameFor(name: string): string | undefined {
  if (KUBERNETES_JOB_NAME.test(name)) return undefined;
  const label = name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .slice(0, 52)
    .replace(/^-+|-+$/g, '');
  return label === '' ? 'job' : label;
}
