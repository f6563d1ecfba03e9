// Debian packages a bench baseline needs, installed with apt-get only when missing and root;
// otherwise the caller skips that baseline with a note. Package scripts are asked not to start
// services (the bench starts its own, on loopback ports).
import { spawnSync } from 'node:child_process';

export function which(cmd) {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

/**
 * @param {string[]} packages
 * @param {(...a: unknown[]) => void} log
 * @returns {{ ok: true } | { ok: false, note: string }}
 */
export function aptInstall(packages, log = console.error) {
  const list = packages.join(' ');
  if (process.getuid?.() !== 0) return { ok: false, note: `not installed and not root (apt-get install ${list})` };
  log(`bench: apt-get install -y ${list} ...`);
  // policy-rc.d is not ours to touch: invoke-rc.d/deb-systemd-invoke honour RUNLEVEL=1.
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive', RUNLEVEL: '1' };
  const install = () =>
    spawnSync('apt-get', ['install', '-y', '--no-install-recommends', ...packages], {
      env,
      encoding: 'utf8',
      timeout: 300_000,
    });
  let r = install();
  if (r.status !== 0) {
    // A fresh machine may have no package lists yet.
    spawnSync('apt-get', ['update'], { env, encoding: 'utf8', timeout: 300_000 });
    r = install();
  }
  if (r.status === 0) return { ok: true };
  return {
    ok: false,
    note: `apt-get install ${list} failed (exit ${r.status}): ${String(r.stderr ?? '')
      .trim()
      .split('\n')
      .slice(-2)
      .join(' ')}`,
  };
}
