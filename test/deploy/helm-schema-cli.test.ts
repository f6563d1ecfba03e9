// helm/leasejob/values.schema.json against `leasejob run` itself. For a table of values of each
// job setting, the schema (ajv, as in helm-chart.test.ts) and the built CLI, given the flags the
// chart's CronJob passes for that job, must agree: what the schema accepts gets as far as
// connecting (exit 69: nothing listens at DATABASE_URL below), what it refuses is a usage error
// (exit 64) before connecting. Otherwise a value passes `helm install` and then fails every run.
// Where a draft-07 schema cannot say what the CLI checks, the row says so (`differs`) and the
// test pins that difference rather than hiding it. Needs no PostgreSQL of its own.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Ajv } from 'ajv';
import { beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { CHART_DIR, RUN_FLAGS, expectedRunArgs, installValues, mergedJob, type Values } from './deploy-files.js';

const DATABASE_URL = 'postgres://u:p@127.0.0.1:9/db';
const values = installValues();
const schema = JSON.parse(readFileSync(path.join(CHART_DIR, 'values.schema.json'), 'utf8')) as Record<string, any>;
const validate = new Ajv({ allErrors: true, strict: true }).compile(schema);

interface Row {
  /** Keys set on the job (over values.yaml's example job, command `true`). */
  patch: Values;
  cli: 'accepts' | 'refuses';
  /** Why the schema says the opposite of the CLI here; unset: they must agree. */
  differs?: string;
}
const rows: Row[] = [];
const accepted = (key: string, ...vs: unknown[]): void => void rows.push(...vs.map((v): Row => ({ patch: { [key]: v }, cli: 'accepts' })));
const refused = (key: string, ...vs: unknown[]): void => void rows.push(...vs.map((v): Row => ({ patch: { [key]: v }, cli: 'refuses' })));
/** The schema accepts what leasejob refuses: a draft-07 schema cannot say it. */
const looser = (patch: Values, why: string): void => void rows.push({ patch, cli: 'refuses', differs: `schema accepts: ${why}` });
/** The schema refuses what leasejob accepts, on purpose. */
const stricter = (patch: Values, why: string): void => void rows.push({ patch, cli: 'accepts', differs: `schema refuses: ${why}` });

// Every row starts a CLI: about a hundred, each a distinct branch of a pattern or an edge of a range.
accepted('schedule', '59 23 31 12 6', '0 0 * * 0', '? 00 01-31/2 * ?', '5/15 * * * *', '0 9 * JAN-MAR,oct mon-FRI', '0 0 * * 1-5/2',
  '0 0 31 */2 *', ' 0  0 * * * ', '@daily');
refused('schedule', '61 * * * *', '60 * * * *', '0 24 * * *', '0 0 0 * *', '0 0 32 * *', '0 0 * 0 *', '0 0 * 13 *', '0 0 * * 8',
  '*/0 * * * *', '0 0 * *', '0 0 1 1 * 2030', '@Daily', 'H * * * *', '0 0 * * MONDAY', '0 0 * * 5#6', '0 0 30 2 *');
looser({ schedule: '30-10 * * * *' }, 'a backwards range');
looser({ schedule: '1,1 * * * *' }, 'a value listed twice');
looser({ schedule: '0 0 31 4-6/2 *' }, "a day of month none of a range's months has");
stricter({ schedule: '0 0 * JANFEB *' }, 'names run together, which cron-parser reads as 12');
// The Kubernetes API server parses a CronJob's schedule with robfig/cron's standard parser: day of
// week 0-6, no L, no #. leasejob takes them (a crontab's cron does), the chart cannot.
for (const schedule of ['0 0 * * 7', '0 0 L * *', '0 0 * * 5L', '0 0 * * FRI#2', '0 0 * * 5-7', '0 0 * * 1,7'])
  stricter({ schedule }, 'what the Kubernetes API server refuses (robfig/cron: day of week 0-6, no L or #)');

accepted('timeZone', 'UTC', 'Etc/UTC', 'Etc/GMT+3', 'Etc/GMT-14', 'America/Argentina/Buenos_Aires', 'EST5EDT', 'US/Eastern');
refused('timeZone', 'Mars/Base', 'America/Sao Paulo', 'Etc/GMT+13', 'GMT+3', '+03:00', 'America/Atlantis', 'America/Sao_Paolo');
stricter({ timeZone: 'america/sao_paulo' }, 'the tz database spelling only: the Kubernetes API server refuses a CronJob timeZone in another case');

accepted('windowFormat', 'yyyy-MM-dd', "yyyy-MM-dd'T'HH:mm", 'kkkk-WW', 'X', "'day 'yy-MM-dd");
refused('windowFormat', 'HH:mm', 'MM-dd', "'yyyy'-MM-dd", 'yyy-MM-dd', 'MM-dd EEE', 'cooo');
looser({ windowFormat: 'yyyy-dd' }, 'a field between the year and the day left out');
looser({ windowFormat: 'yyyy-MM-dd hh:mm' }, 'a 12-hour clock without a');

accepted('windowOffset', '-P1D', 'P0D', 'P1DT-1H', '-1d', '1d', '-2h', '-1d12h', '90m');
refused('windowOffset', '+P1D', 'PT', '-', '1x', '30s1m');

accepted('ttl', '1h30m', '24h', 'PT90S');
rows.push({ patch: { ttl: '1.5s', killGrace: '500ms' }, cli: 'accepts' });
refused('ttl', '0s', '-90s', '30s1m', 'PT0S');
looser({ ttl: '25h' }, 'above 24h');
looser({ ttl: '16s' }, 'no room for the default killGrace 10s (the chart refuses it when rendering)');
accepted('killGrace', 'PT5S');
refused('killGrace', '5 s');
looser({ killGrace: 'PT80S' }, "no room in ttl 90s, in an ISO form the chart's template does not compute");

accepted('onBusy', 'fail');
accepted('onBusy', 'replace');
refused('onBusy', 'queue');
rows.push({ patch: { onBusy: 'wait', waitTimeout: '5m' }, cli: 'accepts' });
rows.push({ patch: { onBusy: 'replace', waitTimeout: '5m' }, cli: 'accepts' });
rows.push({ patch: { onBusy: 'skip', waitTimeout: '5m' }, cli: 'refuses' });
rows.push({ patch: { onBusy: 'wait', waitTimeout: '5 min' }, cli: 'refuses' });
looser({ waitTimeout: '5m' }, 'without onBusy wait, which jobDefaults (skip) gives');

accepted('maxRuntime', '24d');
refused('maxRuntime', '-P1D');
looser({ maxRuntime: '30d' }, 'above 24 days');
accepted('maxDelay', '6h');
refused('maxDelay', '6 hours');
looser({ maxDelay: 'P-1D' }, 'a negative ISO component');
accepted('catchUp', '1d', 'PT6H');
refused('catchUp', '1 day', '-1h');
accepted('maxAttempts', 1, 1000, '3');
refused('maxAttempts', 0, 1001, 'three', '1001');
accepted('retries', 2, '2');
refused('retries', 101, '101');
accepted('retryDelay', '30s');
refused('retryDelay', '30 seconds');
rows.push({ patch: { catchUp: '1d', catchUpLimit: 50 }, cli: 'accepts' });
rows.push({ patch: { catchUp: '1d', catchUpLimit: 1001 }, cli: 'refuses' });
looser({ catchUpLimit: 5 }, 'catchUpLimit without catchUp');
looser({ windowFromSchedule: false, catchUp: '1d' }, 'catchUp without windowFromSchedule (extraRunArgs could not give it either)');
accepted('alertAfter', '366d');
refused('alertAfter', '-10m');
looser({ alertAfter: '400d' }, 'above 366 days');
looser({ alertAfter: '0.4ms' }, 'below half a millisecond');
accepted('alertLookback', '7d', 'PT48H');
refused('alertLookback', '-1d', 'a week');

rows.push({ patch: { windowFromSchedule: false }, cli: 'accepts' });
rows.push({ patch: { windowFromSchedule: false, windowFormat: 'yyyy-MM-dd' }, cli: 'refuses' });
rows.push({ patch: { windowFromSchedule: false, windowOffset: '-P1D' }, cli: 'refuses' });
looser({ windowFromSchedule: false, maxDelay: '6h' }, 'maxDelay without a window (extraRunArgs could give one)');
accepted('passDatabaseUrl', true);
accepted('recordOutput', '4KiB', '65536', '16k', '10 kB');
refused('recordOutput', '4 kilobytes', '4x', '4.5KiB');
looser({ recordOutput: '1MiB' }, 'above 64KiB');
looser({ recordOutput: '0' }, 'zero bytes');

accepted('name', 'nightly-close');
refused('name', ' x');
stricter({ name: 'Nightly_Close' }, 'not a DNS label, which the CronJob name needs');
stricter({ name: 'x'.repeat(53) }, 'longer than a CronJob name allows');
looser({ command: [''] }, "an empty program name (a partial tuple, which ajv's strict mode refuses)");

const label = (r: Row): string => Object.entries(r.patch).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' ');

/** The job as the chart renders it: the patch over the example job, over jobDefaults. */
function job(r: Row): Values {
  return { ...values.jobs[0], command: ['true'], args: [], ...r.patch };
}

function schemaErrors(r: Row): string[] {
  const v = structuredClone(values);
  v.jobs = [job(r)];
  return validate(v) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message ?? ''}`);
}

/** The flags a refusal of this row may name: the patch's (`--` for the command). */
function flagsOf(r: Row): string[] {
  return Object.keys(r.patch).map((k) => (k === 'command' ? '--' : RUN_FLAGS.find((f) => f.key === k)!.flag));
}

async function runJob(r: Row): Promise<{ exitCode: number | undefined; stderr: string; output: string }> {
  const args = expectedRunArgs(values, mergedJob(values, job(r)));
  const res = await runCli(args, {
    LEASEJOB_DATABASE_URL: DATABASE_URL, DATABASE_URL: undefined, LEASEJOB_LOG_LEVEL: 'warn', LEASEJOB_STATE_FILE: undefined,
    LEASEJOB_REQUIRE_SHARED: undefined, JOB_NAME: undefined, KUBERNETES_SERVICE_HOST: undefined,
  }, { timeoutMs: 120_000 });
  return { exitCode: res.exitCode, stderr: res.stderr, output: `leasejob ${args.join(' ')}\n${res.all ?? ''}` };
}

describe('values.schema.json refuses what `leasejob run` refuses, and only that', () => {
  const results = new Map<Row, Awaited<ReturnType<typeof runJob>>>();
  beforeAll(async () => {
    // A few at a time: a busy 2-core machine runs this next to other test files.
    const queue = [...rows];
    const worker = async (): Promise<void> => {
      for (let r = queue.shift(); r !== undefined; r = queue.shift()) results.set(r, await runJob(r));
    };
    await Promise.all(Array.from({ length: 4 }, worker));
  }, 600_000);

  it('the table has values of every job setting the CLI checks, accepted and refused', () => {
    const keys = (cli: Row['cli']): Set<string> => new Set(rows.filter((r) => r.cli === cli && !r.differs).flatMap((r) => Object.keys(r.patch)));
    for (const key of ['name', 'schedule', 'timeZone', 'windowFormat', 'windowOffset', 'ttl', 'killGrace', 'onBusy', 'waitTimeout', 'maxRuntime', 'maxDelay', 'maxAttempts', 'retries', 'retryDelay', 'catchUp', 'alertAfter', 'alertLookback']) {
      expect(keys('accepts'), key).toContain(key);
      expect(keys('refuses'), key).toContain(key);
    }
  });

  it('a job setting has the same schema in jobDefaults and in jobs[]', () => {
    const defaults = schema.properties.jobDefaults.properties as Record<string, unknown>;
    const jobProps = schema.properties.jobs.items.properties as Record<string, unknown>;
    for (const key of Object.keys(defaults)) expect(jobProps[key], key).toEqual(defaults[key]);
  });

  it.each(rows.map((r) => [label(r), r] as const))('%s', (_label, r) => {
    const { exitCode, stderr, output } = results.get(r)!;
    if (r.cli === 'accepts') {
      expect(exitCode, output).toBe(69);
      expect(stderr, output).toContain('database unreachable');
    } else {
      // Refused for this row's value, not for something else in the job.
      expect(exitCode, output).toBe(64);
      const named = flagsOf(r).some((f) => new RegExp(`${f}(?![-\\w])`).test(stderr));
      expect(named, `the refusal names ${flagsOf(r).join(' or ')}:\n${output}`).toBe(true);
    }
    const errors = schemaErrors(r);
    const schemaAccepts = errors.length === 0;
    if (r.differs === undefined) expect(schemaAccepts, `the CLI ${r.cli} it; the schema says: ${errors.join('; ') || 'valid'}`).toBe(r.cli === 'accepts');
    else expect(schemaAccepts, `known difference (${r.differs}); the schema says: ${errors.join('; ') || 'valid'}`).toBe(r.cli === 'refuses');
  });
});
