// Recovery after a crash: TTL 3 s (renewals every 1 s). A holder runs a long child; a contender
// with --on-busy wait is started and has seen the live owner at least once; then the holder's
// runner is SIGKILLed (its child dies through the parent-death signal). Measured per trial:
//   - recovery: kill -> the contender's child has started (it writes a wall-clock timestamp);
//   - floor (the baseline, same trial): kill -> expires_at of the dead holder's lease, read from
//     the database right after the kill: nobody may take the lease before that instant;
//   - holder's child gone after the kill (parent-death signal), for information.
// Target: recovery within TTL + one renew interval (4 s). The kill comes at a random phase of
// the renewal cycle, so the floor varies between about 2 and 3 s.
import path from 'node:path';
import { BIN, NODE, alive, fileLines, logLines, parseStamp, sleep, stampCmd, start, waitFor } from '../lib/proc.mjs';

const TTL_MS = 3000;
const RENEW_MS = 1000;

export async function run(ctx) {
  const trials = ctx.n(6, 1);
  const recovery = [];
  const floor = [];
  const overFloor = [];
  const holderChildGone = [];
  const problems = [];
  for (let t = 0; t < trials; t++) {
    try {
      const r = await trial(ctx, t, trials);
      recovery.push(r.recovery);
      floor.push(r.floor);
      overFloor.push(r.recovery - r.floor);
      holderChildGone.push(r.holderChildGone);
      if (r.problem) problems.push(r.problem);
    } catch (err) {
      problems.push(err.message);
    }
  }
  ctx.report.add({
    bench: 'recovery', name: 'kill -> waiting contender child starts', unit: 'ms', samples: recovery,
    baseline: { name: 'floor: kill -> lease expiry', samples: floor },
    target: { text: `<= ${TTL_MS + RENEW_MS} ms (TTL + interval)`, ok: recovery.length === trials && recovery.every((x) => x <= TTL_MS + RENEW_MS) },
    note: `time over the floor (child start - expires_at): ${overFloor.map((x) => Math.round(x)).join(', ')} ms` + (problems.length ? `; problems: ${problems.slice(0, 3).join(' | ')}` : ''),
  });
  ctx.report.add({ bench: 'recovery', name: "holder's child gone after SIGKILL of its runner", unit: 'ms', samples: holderChildGone, note: 'parent-death signal (setpriv --pdeathsig SIGKILL)' });
}

async function trial(ctx, t, trials) {
  const job = ctx.uid('rec');
  const holderStamp = path.join(ctx.tmp, `${job}.holder`);
  const contStamp = path.join(ctx.tmp, `${job}.contender`);
  const common = ['run', '--name', job, '--schema', ctx.schema, '--ttl', '3s', '--kill-grace', '500ms', '--window', 'w1'];
  const holder = start(NODE, [BIN, ...common, '--', 'sh', '-c', `${stampCmd(holderStamp)}; exec sleep 60`], { env: ctx.env });
  const holderChild = parseStamp((await waitFor(() => fileLines(holderStamp)[0], { what: 'holder child', timeoutMs: 30_000 })));
  const contender = start(NODE, [BIN, ...common, '--on-busy', 'wait', '--log-level', 'debug', '--', 'sh', '-c', stampCmd(contStamp)], { env: ctx.env });
  // Until the contender has met the live owner (its debug log says it is waiting), or 3 s.
  let stderr = '';
  contender.child.stderr.on('data', (d) => (stderr += d));
  await waitFor(() => logLines(stderr).some((l) => /busy/.test(l.msg ?? '')), { timeoutMs: 3_000, what: 'contender waiting' }).catch(() => {});
  // Kill at a spread of phases of the renewal cycle.
  await sleep(200 + Math.round((RENEW_MS * t) / Math.max(1, trials)) + Math.random() * 100);
  const killWall = Date.now();
  const killMono = performance.now();
  process.kill(holder.pid, 'SIGKILL');
  await waitFor(() => !alive(holderChild.pid), { everyMs: 1, timeoutMs: 10_000, what: "holder's child to die" });
  const holderChildGone = performance.now() - killMono;
  // Seconds before anyone can take it over: the dead holder's lease as it was left.
  const lease = (await ctx.admin.query(`SELECT expires_at, renewed_at, generation::text FROM "${ctx.schema}".leases WHERE name = $1`, [job])).rows[0];
  const contChild = parseStamp(await waitFor(() => fileLines(contStamp)[0], { what: 'contender child', timeoutMs: 20_000 }));
  const res = await contender.done;
  await holder.done;
  return {
    recovery: contChild.wallMs - killWall,
    floor: lease.expires_at.getTime() - killWall,
    holderChildGone,
    problem: res.code !== 0 ? `contender exited ${res.code}` : undefined,
  };
}
