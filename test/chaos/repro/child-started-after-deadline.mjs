// Regression check for a product weakness the chaos suite found (fixed in af3ea98, which logs
// `lease acquired too late to start safely` instead; exits 0 since): `leasejob run` started the
// child even when its own stop point (acquire sent + TTL - grace - margin) had already passed
// by the time the acquisition was answered, then stopped it at once (SIGTERM, SIGKILL).
// In a chaos round a runner starved of CPU for 3.7 s between `lease acquired` and `child
// started` started its child 0.9 s after another generation had taken the lease over.
// Here the delay is made deterministic: the runner's route is black-holed for 3.3 s right after
// it starts, so its acquire (TTL 3 s, kill grace 500 ms: stop deadline 2.2 s after sending) is
// answered about 3.2 s after it was sent. `remainingMs` in `lease lost` is what was left of the
// TTL on the runner's clock: below 800 ms (grace + margin) the stop deadline had passed, below 0
// the lease could already have expired, before the child was even started.
//
//   npm run build && node test/chaos/repro/child-started-after-deadline.mjs [attempts=3]
//
// Prints each run's log messages; exits 1 when a child was started after the deadline.
import { execFileSync, spawn } from 'node:child_process';
import path from 'node:path';
import { startEmbeddedPostgres } from '../../helpers/embedded-pg.mjs';
import { startProxy } from '../lib/proxy.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../..');
const BIN = path.join(ROOT, 'bin/leasejob.js');
const attempts = Number(process.argv[2] ?? 3);
const server = await startEmbeddedPostgres();
const proxy = await startProxy(server.port);
let late = 0;
try {
  execFileSync(process.execPath, [BIN, 'migrate', '--database-url', server.url, '--schema', 'lj', '--log-level', 'warn']);
  for (let i = 0; i < attempts; i += 1) {
    const runner = spawn(process.execPath, [BIN, 'run', '--name', 'late', '--window', `w${i}`, '--ttl', '3s', '--kill-grace', '500ms',
      '--database-url', proxy.url(server.url), '--schema', 'lj', '--', 'sleep', '2'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    runner.stderr.on('data', (d) => (stderr += d));
    await new Promise((r) => setTimeout(r, 100)); // before the runner has connected
    proxy.cut('blackhole');
    await new Promise((r) => setTimeout(r, 3_300));
    proxy.heal();
    const code = await new Promise((resolve) => runner.once('exit', (c, s) => resolve(c ?? s)));
    const lines = stderr.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    const started = lines.findIndex((l) => l.msg === 'child started');
    const lost = lines.find((l) => l.msg === 'lease lost');
    if (started >= 0 && lost && lost.remainingMs < 800 && lines.indexOf(lost) > started) late += 1;
    console.log(`run ${i}: exit ${code}: ${lines.map((l) => `${l.msg}${l.rttMs !== undefined ? ` (rtt ${l.rttMs} ms)` : ''}${l.remainingMs !== undefined ? ` (remainingMs ${l.remainingMs})` : ''}`).join(' > ')}`);
  }
  console.log(`${late} of ${attempts} runs started their child after their stop deadline had passed`);
  process.exitCode = late > 0 ? 1 : 0;
} finally {
  await proxy.close();
  await server.stop();
}
