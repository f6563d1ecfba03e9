// The host a runner records as its own: in owners, events, event counts and clock readings.
// In Kubernetes the chart sets LEASEJOB_NODE_NAME to the pod's node (spec.nodeName): every pod
// has a new hostname, but clocks belong to nodes, so the `hosts` table and the exporter's
// per-host series stay bounded by the nodes, however many pods ever ran (docs/monitoring.md).
import { hostname } from 'node:os';
import { UsageError } from './errors.js';

/** A Kubernetes node name: a DNS subdomain (no ':' either, which separates an owner's parts). */
const NODE_NAME = /^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/;

let cached: string | undefined;

export function hostName(env: NodeJS.ProcessEnv = process.env): string {
  const node = env.LEASEJOB_NODE_NAME;
  if (node === undefined || node === '') return (cached ??= hostname());
  if (!NODE_NAME.test(node))
    throw new UsageError(
      `Expected LEASEJOB_NODE_NAME to be a node name (lower-case letters, digits, '.' and '-', at most 253), got ${JSON.stringify(node)}.`,
    );
  return node;
}
