// A throwaway single-node etcd on loopback for the `etcdctl lock` baseline. Uses the Debian
// packages etcd-server/etcd-client; installs them (apt-get) only when missing and running as
// root; otherwise the caller skips the baseline with a note.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort } from '../../helpers/embedded-pg.mjs';
import { sleep, stopProcess } from './proc.mjs';

function which(cmd) {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

/** Find etcd and etcdctl, installing them when absent and root. Returns { etcd, etcdctl } or { note }. */
function findEtcd(log = console.error) {
  let etcd = which('etcd');
  let etcdctl = which('etcdctl');
  if (etcd && etcdctl) return { etcd, etcdctl };
  if (process.getuid?.() !== 0) return { note: 'etcd/etcdctl not installed and not root: etcdctl baseline skipped (apt-get install etcd-server etcd-client)' };
  log('bench: etcd not found; apt-get install -y etcd-server etcd-client ...');
  // No service start from the package scripts: policy-rc.d is not ours to touch, so ask
  // invoke-rc.d/deb-systemd-invoke through the environment they honour; the bench starts its own.
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive', RUNLEVEL: '1' };
  const install = () => spawnSync('apt-get', ['install', '-y', '--no-install-recommends', 'etcd-server', 'etcd-client'], { env, encoding: 'utf8', timeout: 300_000 });
  let r = install();
  if (r.status !== 0) {
    // A fresh machine may have no package lists yet.
    spawnSync('apt-get', ['update'], { env, encoding: 'utf8', timeout: 300_000 });
    r = install();
  }
  etcd = which('etcd');
  etcdctl = which('etcdctl');
  if (etcd && etcdctl) return { etcd, etcdctl, installed: true };
  return { note: `apt-get install etcd-server etcd-client failed (exit ${r.status}): etcdctl baseline skipped. ${String(r.stderr ?? '').trim().split('\n').slice(-2).join(' ')}` };
}

/** Start etcd on loopback ports; returns { endpoint, etcdctl, env, stop } or { note }. */
export async function startEtcd(log = console.error) {
  const found = findEtcd(log);
  if (!found.etcd) return { note: found.note };
  const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-bench-etcd-'));
  const client = await freePort();
  const peer = await freePort();
  const endpoint = `http://127.0.0.1:${client}`;
  const proc = spawn(found.etcd, [
    '--name', 'bench', '--data-dir', path.join(dir, 'data'),
    '--listen-client-urls', endpoint, '--advertise-client-urls', endpoint,
    '--listen-peer-urls', `http://127.0.0.1:${peer}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${peer}`,
    '--initial-cluster', `bench=http://127.0.0.1:${peer}`, '--initial-cluster-state', 'new',
    '--log-level', 'error',
  ], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ETCD_UNSUPPORTED_ARCH: process.arch === 'x64' ? '' : process.arch } });
  let errText = '';
  proc.stderr.on('data', (d) => (errText = (errText + d).slice(-4000)));
  const env = { ...process.env, ETCDCTL_API: '3' };
  const stop = async () => {
    await stopProcess(proc, 5_000);
    rmSync(dir, { recursive: true, force: true });
  };
  const end = performance.now() + 20_000;
  while (performance.now() < end) {
    if (proc.exitCode !== null) break;
    const r = spawnSync(found.etcdctl, ['--endpoints', endpoint, 'endpoint', 'health'], { env, encoding: 'utf8', timeout: 5_000 });
    if (r.status === 0) {
      const v = spawnSync(found.etcd, ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0];
      return { endpoint, etcdctl: found.etcdctl, env, stop, version: v, installed: found.installed ?? false };
    }
    await sleep(200);
  }
  await stop();
  return { note: `etcd did not become healthy: ${errText.trim().split('\n').slice(-3).join(' ')}` };
}
