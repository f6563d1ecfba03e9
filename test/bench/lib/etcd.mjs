// A throwaway single-node etcd on loopback for the `etcdctl lock` baseline. Uses the Debian
// packages etcd-server/etcd-client; installs them (apt-get) only when missing and running as
// root; otherwise the caller skips the baseline with a note.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort } from '../../helpers/embedded-pg.mjs';
import { aptInstall, which } from './apt.mjs';
import { sleep, stopProcess } from './proc.mjs';

/** Find etcd and etcdctl, installing them when absent and root. Returns { etcd, etcdctl } or { note }. */
function findEtcd(log = console.error) {
  let etcd = which('etcd');
  let etcdctl = which('etcdctl');
  if (etcd && etcdctl) return { etcd, etcdctl };
  const r = aptInstall(['etcd-server', 'etcd-client'], log);
  if (!r.ok) return { note: `etcd/etcdctl: ${r.note}: etcdctl baseline skipped` };
  etcd = which('etcd');
  etcdctl = which('etcdctl');
  if (etcd && etcdctl) return { etcd, etcdctl, installed: true };
  return { note: 'etcd/etcdctl still not found after apt-get install: etcdctl baseline skipped' };
}

/** Start etcd on loopback ports; returns { endpoint, etcdctl, env, stop } or { note }. */
export async function startEtcd(log = console.error) {
  const found = findEtcd(log);
  if (!found.etcd) return { note: found.note };
  const dir = mkdtempSync(path.join(tmpdir(), 'leasejob-bench-etcd-'));
  const client = await freePort();
  const peer = await freePort();
  const endpoint = `http://127.0.0.1:${client}`;
  const proc = spawn(
    found.etcd,
    [
      '--name',
      'bench',
      '--data-dir',
      path.join(dir, 'data'),
      '--listen-client-urls',
      endpoint,
      '--advertise-client-urls',
      endpoint,
      '--listen-peer-urls',
      `http://127.0.0.1:${peer}`,
      '--initial-advertise-peer-urls',
      `http://127.0.0.1:${peer}`,
      '--initial-cluster',
      `bench=http://127.0.0.1:${peer}`,
      '--initial-cluster-state',
      'new',
      '--log-level',
      'error',
    ],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, ETCD_UNSUPPORTED_ARCH: process.arch === 'x64' ? '' : process.arch },
    },
  );
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
    const r = spawnSync(found.etcdctl, ['--endpoints', endpoint, 'endpoint', 'health'], {
      env,
      encoding: 'utf8',
      timeout: 5_000,
    });
    if (r.status === 0) {
      const v = spawnSync(found.etcd, ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0];
      return { endpoint, etcdctl: found.etcdctl, env, stop, version: v, installed: found.installed ?? false };
    }
    await sleep(200);
  }
  await stop();
  return { note: `etcd did not become healthy: ${errText.trim().split('\n').slice(-3).join(' ')}` };
}
