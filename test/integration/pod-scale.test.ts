// Issue 16, pod scale: in Kubernetes every pod has a new hostname. Runs keyed by the pod's name
// grew the hosts table and the exporter's per-host series by one for every pod that ever ran;
// keyed by the node (LEASEJOB_NODE_NAME, which the chart sets from spec.nodeName), they stay
// bounded by nodes and jobs. Each "pod" here is a run in its own UTS namespace with its own
// hostname (root and unshare), on one node name.
import { spawnSync } from 'node:child_process';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, runCli, scrapeOnce } from '../helpers/cli.js';
import { testDb, type TestDb } from '../helpers/db.js';

const PODS = 12;
const canRename = process.getuid?.() === 0 && spawnSync('unshare', ['-u', 'true']).status === 0;
if (!canRename) console.info('pod-scale series test skipped: needs root and unshare (a UTS namespace per pod)');

let db: TestDb;
beforeAll(async () => {
  db = await testDb();
});
afterAll(async () => {
  await db?.close();
});

const conn = (): string[] => ['--database-url', db.url, '--schema', db.schema];

/** `leasejob run` as a pod: its own hostname `pod`, on node `node` (or none: the pre-node keying). */
function runPod(pod: string, node: string | undefined, job: string, window: string) {
  const args = ['run', ...conn(), '--name', job, '--window', window, '--', 'true'];
  return execa('unshare', ['-u', 'sh', '-c', 'hostname "$0" && exec "$@"', pod, process.execPath, BIN, ...args], {
    env: { LEASEJOB_NODE_NAME: node },
    reject: false,
    all: true,
    timeout: 60_000,
  });
}

/** The exporter's series (sample lines), and those with a host label. */
async function series(): Promise<{ all: string[]; hosts: Set<string> }> {
  const text = await scrapeOnce(conn());
  const all = text.split('\n').filter((l) => l.startsWith('leasejob_'));
  return { all, hosts: new Set(all.flatMap((l) => /host="([^"]*)"/.exec(l)?.[1] ?? [])) };
}

describe.skipIf(!canRename)('many pods on one node', () => {
  it(`${PODS} pods with their own hostnames on node-a: one host, and the exporter's series do not grow with the pods`, async () => {
    for (const job of ['scale-a', 'scale-b']) {
      const r = await runPod('pod-0', 'node-a', job, 'w0');
      expect(r.exitCode, r.all).toBe(0);
    }
    const first = await series();
    expect([...first.hosts]).toEqual(['node-a']);
    for (let i = 1; i < PODS; i++) {
      const r = await runPod(`pod-${i}`, 'node-a', i % 2 ? 'scale-a' : 'scale-b', `w${i}`);
      expect(r.exitCode, r.all).toBe(0);
    }
    const after = await series();
    expect([...after.hosts]).toEqual(['node-a']);
    expect(after.all.filter((l) => l.startsWith('leasejob_clock_offset_seconds{'))).toHaveLength(1);
    // The same series, only their values moved on.
    const names = (s: string[]) => s.map((l) => l.slice(0, l.lastIndexOf(' '))).sort();
    expect(names(after.all)).toEqual(names(first.all));
    const hosts = await db.rows<{ host: string }>(`SELECT host FROM ${db.schema}.hosts`);
    expect(hosts.map((h) => h.host)).toEqual(['node-a']);
    const owners = await db.rows<{ host: string }>(`SELECT DISTINCT host FROM ${db.schema}.events`);
    expect(owners.map((h) => h.host)).toEqual(['node-a']);
  });

  it('without a node name, each pod is a host of its own (what the node keying bounds)', async () => {
    for (const pod of ['pod-x', 'pod-y']) {
      const r = await runPod(pod, undefined, 'scale-c', pod);
      expect(r.exitCode, r.all).toBe(0);
    }
    const { hosts } = await series();
    expect(hosts).toContain('pod-x');
    expect(hosts).toContain('pod-y');
  });

  it('a LEASEJOB_NODE_NAME that is no node name: exit 64, saying so, nothing recorded', async () => {
    const r = await runCli(['run', ...conn(), '--name', 'bad-node', '--window', 'w', '--', 'true'], {
      LEASEJOB_NODE_NAME: 'Node:1',
    });
    expect(r.exitCode, r.all).toBe(64);
    expect(r.stderr).toContain('LEASEJOB_NODE_NAME');
    expect(await db.rows(`SELECT 1 FROM ${db.schema}.jobs WHERE name = 'bad-node'`)).toEqual([]);
  });
});
