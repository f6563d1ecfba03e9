// One contract, two stores: the same lease, window and event scenarios against PostgreSQL and
// the embedded SQLite store.
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveConnection } from '../../src/store/postgres/connection.js';
import { silentLogger } from '../../src/log.js';
import { readJobStates } from '../../src/monitor/job-states.js';
import { readOccurrences } from '../../src/monitor/occurrences.js';
import { createPool, PgStore } from '../../src/store/postgres/store.js';
import { runWithLease } from '../../src/lease/runner.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import type { AcquireInput, AcquireRow, LeaseStore } from '../../src/store/contract.js';
import { testDb } from '../helpers/db.js';
import { tempDirs } from '../helpers/temp.js';
import { waitFor } from '../helpers/wait.js';

// Registered first, so the directories are removed after the stores are closed.
const freshDir = tempDirs('leasejob-contract-');
const opened: LeaseStore[] = [];
afterAll(async () => {
  for (const s of opened) await s.close();
});

const factories: Array<[string, () => Promise<LeaseStore>]> = [
  [
    'postgresql',
    async () => {
      const db = await testDb();
      await db.close();
      const store = new PgStore(createPool(resolveConnection(db.url), { max: 2 }), db.schema);
      opened.push(store);
      return store;
    },
  ],
  [
    'sqlite',
    async () => {
      const dir = freshDir();
      const store = SqliteStore.open(path.join(dir, 'state.db'));
      opened.push(store);
      return store;
    },
  ],
];

/**
 * An acquire of an expired lease, as a runner makes it: on PostgreSQL, a machine so busy that the
 * statement took longer to reach the server than the holder's margin (TTL/10) makes the clocks
 * look apart (`unconfirmed`): then the lease is watched for the holder's TTL and taken.
 */
async function takeOver(s: LeaseStore, i: AcquireInput): Promise<AcquireRow> {
  const first = await s.acquire(i);
  if (first.outcome !== 'unconfirmed') return first;
  await new Promise((r) => setTimeout(r, (first.clocks?.holderTtlMs ?? 0) + 100));
  const observed = { generation: first.holderGeneration!, renewals: first.clocks!.renewals! };
  return s.acquire({ ...i, observed });
}

/** No renewal: undefined, or (PostgreSQL from 035) a row saying so with the database's clock. */
const notRenewed = (r: { notRenewed?: true } | undefined): boolean => r === undefined || r.notRenewed === true;

const base = { owner: 'host-a:1:aaaa', ttlMs: 3_000, renewIntervalMs: 1_000, rerun: false, hostTime: new Date() };

/** The token of the job's first acquisition, as its history records it. */
const firstToken = async (s: LeaseStore, job: string): Promise<string> =>
  (await s.readHistory(job, 100)).find((e) => e.kind === 'acquired')!.generation!;

/**
 * A token issued after `prev` (a decimal string): greater, never equal. PostgreSQL counts on by
 * one within a server's start; the embedded store's tokens are a hybrid logical clock (the clock
 * in ms at each acquisition, or the last + 1), so only the order is the contract.
 */
const after = (prev: string | null | undefined) =>
  expect.toSatisfy((g: unknown) => typeof g === 'string' && BigInt(g) > BigInt(prev!), `a token above ${prev}`);

describe.each(factories)('store contract: %s', (_kind, make) => {
  it('acquires with a token, refuses a second owner, releases without deleting, then a greater token', async () => {
    const s = await make();
    const a = await s.acquire({ ...base, job: 'j' });
    expect(a).toMatchObject({ outcome: 'acquired', generation: expect.stringMatching(/^[1-9][0-9]*$/), attempt: 1 });
    const b = await s.acquire({ ...base, job: 'j', owner: 'host-b:2:bbbb' });
    expect(b).toMatchObject({
      outcome: 'busy',
      holder: 'host-a:1:aaaa',
      holderGeneration: a.generation,
      generation: null,
    });
    expect(
      await s.finish({ job: 'j', owner: base.owner, generation: a.generation!, outcome: 'none', hostTime: new Date() }),
    ).toMatchObject({ held: true });
    const c = await s.acquire({ ...base, job: 'j', owner: 'host-b:2:bbbb' });
    expect(c).toMatchObject({ outcome: 'acquired', generation: after(a.generation) });
  });

  it('finish is safe to repeat: a retry after a committed finish answers held and records nothing twice; an admin release is not ours', async () => {
    const s = await make();
    const a = await s.acquire({ ...base, job: 'f', window: 'k' });
    const done = {
      job: 'f',
      owner: base.owner,
      generation: a.generation!,
      window: 'k',
      outcome: 'completed' as const,
      exitCode: 0,
      hostTime: new Date(),
    };
    expect(await s.finish(done)).toMatchObject({ held: true });
    expect(await s.finish(done)).toMatchObject({ held: true });
    expect((await s.readHistory('f', 100)).map((e) => e.kind)).toEqual([
      'acquired',
      'window-claimed',
      'window-completed',
      'released',
    ]);

    const g = await s.acquire({ ...base, job: 'g', window: 'k' });
    await s.release('g', new Date());
    expect(await s.finish({ ...done, job: 'g', generation: g.generation! })).toMatchObject({ held: false });
  });

  it('a finish retry still answers held once the next run has taken the released lease, and records no loss', async () => {
    const s = await make();
    const a = await s.acquire({ ...base, job: 'n', window: 'k1' });
    const done = {
      job: 'n',
      owner: base.owner,
      generation: a.generation!,
      window: 'k1',
      outcome: 'completed' as const,
      exitCode: 0,
      hostTime: new Date(),
    };
    expect(await s.finish(done)).toMatchObject({ held: true });
    // The answer was lost; meanwhile the next run takes the lease for its own window.
    const next = await s.acquire({ ...base, job: 'n', owner: 'host-b:2:bbbb', window: 'k2' });
    expect(next).toMatchObject({ outcome: 'acquired', generation: after(a.generation) });
    expect(await s.finish(done)).toMatchObject({ held: true });
    const kinds = (await s.readHistory('n', 100)).map((e) => e.kind);
    expect(kinds).toEqual(['acquired', 'window-claimed', 'window-completed', 'released', 'acquired', 'window-claimed']);
    expect(await s.renew('n', 'host-b:2:bbbb', next.generation!, 3_000, 500, 2_000)).toBeDefined();
  });

  it("keeps a window's output for the attempt that recorded it (binary-safe); a generation that no longer claims the window writes nothing", async () => {
    const s = await make();
    const bytes = Buffer.from([0, 255, 10, 0xc3, 0x28, 65]);
    const a = await s.acquire({ ...base, job: 'o', window: 'k' });
    const g1 = a.generation!;
    expect(await s.recordOutput!({ job: 'o', window: 'k', generation: g1, tail: bytes, bytes: 6000 })).toBe(true);
    await s.finish({
      job: 'o',
      owner: base.owner,
      generation: g1,
      window: 'k',
      outcome: 'failed',
      exitCode: 3,
      hostTime: new Date(),
    });
    let [o] = await s.readOutputs!('o', 10);
    expect(o).toMatchObject({ window: 'k', generation: g1, attempt: 1, outcome: 'failed', exitCode: 3, bytes: 6000 });
    expect(Buffer.compare(o!.tail, bytes)).toBe(0);
    expect(o!.recordedAt).toBeInstanceOf(Date);
    // The retry claims the window as generation 2: the first attempt's late write is refused.
    const g2 = (await s.acquire({ ...base, job: 'o', window: 'k' })).generation!;
    expect(await s.recordOutput!({ job: 'o', window: 'k', generation: g1, tail: Buffer.from('late'), bytes: 4 })).toBe(
      false,
    );
    expect(
      await s.recordOutput!({ job: 'o', window: 'k', generation: g2, tail: Buffer.from('second'), bytes: 6 }),
    ).toBe(true);
    [o] = await s.readOutputs!('o', 10);
    expect(o).toMatchObject({ generation: g2, attempt: 2, bytes: 6 });
    expect(o!.tail.toString()).toBe('second');
    expect(await s.readOutputs!('nothing-here', 10)).toEqual([]);
  });

  it('renews only the live owner and generation', async () => {
    const s = await make();
    const g = (await s.acquire({ ...base, job: 'r' })).generation!;
    const other = String(BigInt(g) + 1n);
    expect(await s.renew('r', base.owner, g, 3_000, 500, 2_000)).toBeDefined();
    expect(notRenewed(await s.renew('r', 'someone:9:x', g, 3_000, 500, 2_000))).toBe(true);
    expect(notRenewed(await s.renew('r', base.owner, other, 3_000, 500, 2_000))).toBe(true);
    await s.release('r', new Date());
    expect(notRenewed(await s.renew('r', base.owner, g, 3_000, 500, 2_000))).toBe(true);
  });

  it('a completed window is final; a failed one resumes as attempt 2; --rerun reopens a completed one', async () => {
    const s = await make();
    const run = (window: string, ok: boolean, rerun = false) =>
      runWithLease(
        s,
        { name: 'w', ttlMs: 3_000, killGraceMs: 500, window: { key: window, rerun } },
        async (ctx) => {
          if (!ok) throw new Error('boom');
          return ctx.attempt;
        },
        silentLogger,
      );
    expect(await run('d1', false)).toMatchObject({ status: 'failed', attempt: 1 });
    expect(await run('d1', true)).toMatchObject({ status: 'completed', value: 2 });
    expect(await run('d1', true)).toMatchObject({ status: 'skipped', reason: 'done' });
    expect(await run('d1', true, true)).toMatchObject({ status: 'completed', value: 3 });
  });

  it('readJobWindows: the open windows newest started first, then the latest completed ones newest first, each at most the limit', async () => {
    const s = await make();
    const run = (window: string, ok: boolean) =>
      runWithLease(
        s,
        { name: 'ws', ttlMs: 3_000, killGraceMs: 500, window: { key: window } },
        async () => {
          if (!ok) throw new Error('boom');
          return 0;
        },
        silentLogger,
      );
    for (const [w, ok] of [
      ['c1', true],
      ['f1', false],
      ['c2', true],
      ['f2', false],
      ['f2', false],
      ['c3', true],
    ] as const)
      await run(w, ok);
    const all = await s.readJobWindows!('ws', 10);
    expect(all.map((w) => [w.window, w.outcome, w.attempts])).toEqual([
      ['f2', 'failed', 2],
      ['f1', 'failed', 1],
      ['c3', 'completed', 1],
      ['c2', 'completed', 1],
      ['c1', 'completed', 1],
    ]);
    expect(all[2]).toMatchObject({
      generation: after(all[1]!.generation),
      owner: expect.any(String),
      completedAt: expect.any(Date),
      startedAt: expect.any(Date),
      finishedAt: expect.any(Date),
      exitCode: 0,
    });
    expect(all[0]!.completedAt).toBeNull();
    expect((await s.readJobWindows!('ws', 1)).map((w) => w.window)).toEqual(['f2', 'c3']);
    expect(await s.readJobWindows!('nobody', 10)).toEqual([]);
  });

  it('an expired, unreleased lease is taken over as a stale-takeover and its window resumed', async () => {
    const s = await make();
    const first = await s.acquire({ ...base, job: 't', ttlMs: 1_500, renewIntervalMs: 500, window: 'x' });
    expect(first.outcome).toBe('acquired');
    await new Promise((r) => setTimeout(r, 1_700));
    const second = await takeOver(s, { ...base, job: 't', owner: 'host-b:2:bbbb', window: 'x' });
    expect(second).toMatchObject({ outcome: 'acquired', generation: after(first.generation), attempt: 2 });
    expect(notRenewed(await s.renew('t', base.owner, first.generation!, 3_000, 500, 2_000))).toBe(true);
    const fin = await s.finish({
      job: 't',
      owner: base.owner,
      generation: first.generation!,
      window: 'x',
      outcome: 'completed',
      hostTime: new Date(),
    });
    expect(fin.held).toBe(false);
    // The takeover recorded the first generation's loss; its owner's late finish adds nothing.
    const events = await s.readHistory('t', 100);
    expect(events.map((e) => e.kind)).toEqual([
      'acquired',
      'window-claimed',
      'stale-takeover',
      'lease-lost',
      'window-claimed',
    ]);
    expect(events[3]).toMatchObject({ owner: base.owner, generation: first.generation, window: 'x', host: 'host-a' });
    expect((await s.readEventCounts(['lease-lost'])).map((c) => [c.job, c.host, c.n])).toContainEqual([
      't',
      'host-a',
      1,
    ]);
  });

  it('taking over its own unanswered acquisition is no loss', async () => {
    const s = await make();
    // An acquisition that committed but whose answer never came (a silent connection): the same
    // runner, retrying once it expired, takes it over.
    const first = await s.acquire({ ...base, job: 'own', ttlMs: 1_500, renewIntervalMs: 500, window: 'd' });
    await new Promise((r) => setTimeout(r, 1_700));
    expect(await s.acquire({ ...base, job: 'own', window: 'd' })).toMatchObject({
      outcome: 'acquired',
      generation: after(first.generation),
      attempt: 2,
    });
    const kinds = (await s.readHistory('own', 100)).map((e) => e.kind);
    expect(kinds).toEqual(['acquired', 'window-claimed', 'stale-takeover', 'window-claimed']);
  });

  /** `s`, except that acquire number `n` (1-based) commits and then loses its answer, as over a connection gone silent. */
  const answerLost = (s: LeaseStore, n: number, onCall?: (call: number) => Promise<void>): LeaseStore => {
    let calls = 0;
    return Object.assign(Object.create(s) as LeaseStore, {
      async acquire(i: AcquireInput): Promise<AcquireRow> {
        calls += 1;
        const row = await s.acquire(i);
        await onCall?.(calls);
        if (calls === n)
          throw Object.assign(new Error('the database did not answer within 1000 ms'), { code: 'ETIMEDOUT' });
        return row;
      },
    });
  };

  /** Another owner holds `job`: our first acquire finds it busy while it finishes, our second is answered into the void. */
  const lostAfterHolderFinishes = async (s: LeaseStore, job: string): Promise<LeaseStore> => {
    const holder = 'host-b:2:bbbb';
    const held = await s.acquire({ ...base, owner: holder, job, ttlMs: 30_000 });
    return answerLost(s, 2, async (call) => {
      if (call === 1)
        await s.finish({ job, owner: holder, generation: held.generation!, outcome: 'none', hostTime: new Date() });
    });
  };

  it('a run that gives up on an acquire whose answer was lost gives the lease back: the next owner takes it at once, no loss', async () => {
    const s = await make();
    const task = async (): Promise<number> => 1;
    await expect(
      runWithLease(
        answerLost(s, 1),
        { name: 'gave-up', ttlMs: 30_000, killGraceMs: 500, window: { key: 'd' } },
        task,
        silentLogger,
      ),
    ).rejects.toThrow(/did not answer/);
    // Not held any more: another owner acquires it now (a live lease would answer busy for 30 s).
    expect(await s.acquire({ ...base, owner: 'host-b:2:bbbb', job: 'gave-up', window: 'd' })).toMatchObject({
      outcome: 'acquired',
      generation: after(await firstToken(s, 'gave-up')),
      attempt: 2,
    });
    const kinds = (await s.readHistory('gave-up', 100)).map((e) => e.kind);
    expect(kinds).toEqual(['acquired', 'window-claimed', 'released', 'acquired', 'window-claimed']);
    // Only the owner's live lease is given back.
    expect(await s.abandon!('gave-up', base.owner, new Date(), 1_000)).toBeUndefined();
    expect(await s.abandon!('gave-up', 'host-c:3:cccc', new Date(), 1_000)).toBeUndefined();
    expect((await s.readJobRows('gave-up')).rows[0]).toMatchObject({ held: true, owner: 'host-b:2:bbbb' });

    // An owner the caller gives may be shared by its other calls: a lease held under it is not
    // this call's to give back (nor to take up).
    const shared = 'host-d:4:dddd';
    const theirs = await s.acquire({ ...base, owner: shared, job: 'shared', ttlMs: 30_000 });
    await expect(
      runWithLease(
        answerLost(s, 1),
        { name: 'shared', ttlMs: 30_000, killGraceMs: 500, owner: shared },
        task,
        silentLogger,
      ),
    ).rejects.toThrow(/did not answer/);
    expect((await s.readJobRows('shared')).rows[0]).toMatchObject({
      held: true,
      owner: shared,
      generation: theirs.generation,
    });
    // Waiting: 1 busy, 2 unanswered, 3 and on busy again under the shared owner: waited on, not taken up.
    const waited = await runWithLease(
      answerLost(s, 2),
      { name: 'shared', ttlMs: 30_000, killGraceMs: 500, owner: shared, onBusy: 'wait', waitTimeoutMs: 3_000 },
      task,
      silentLogger,
    ).catch((err: Error) => err.message);
    expect(waited).toMatch(/--wait-timeout/);
    expect((await s.readJobRows('shared')).rows[0]).toMatchObject({
      held: true,
      owner: shared,
      generation: theirs.generation,
    });
  });

  it('the lease of an unanswered acquire is given back however the run leaves (here: its window missed meanwhile); nothing is asked when nothing was sent', async () => {
    const s = await make();
    // 1: busy, the holder finishes meanwhile; 2: ours (window claimed), answer lost; 3: past
    // --max-delay by then, answered missed.
    const lossy = await lostAfterHolderFinishes(s, 'late-miss');
    const scheduledAt = new Date(Date.now() - 1_000);
    const r = await runWithLease(
      lossy,
      {
        name: 'late-miss',
        ttlMs: 30_000,
        killGraceMs: 500,
        onBusy: 'wait',
        window: { key: 'm', scheduledAt, maxDelayMs: 2_500 },
      },
      async () => 0,
      silentLogger,
    );
    expect(r).toMatchObject({ status: 'skipped', reason: 'missed' });
    expect((await s.readJobRows('late-miss')).rows[0]).toMatchObject({ held: false });
    expect((await s.readHistory('late-miss', 100)).map((e) => e.kind)).toEqual([
      'acquired',
      'released',
      'acquired',
      'window-claimed',
      'window-missed',
      'released',
    ]);

    // A connection that never opened sent nothing: no give-back is asked for.
    let asked = 0;
    const refused = Object.assign(Object.create(s) as LeaseStore, {
      async acquire(): Promise<AcquireRow> {
        throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), {
          code: 'ECONNREFUSED',
          statementSent: false,
        });
      },
      async abandon(): Promise<string | undefined> {
        asked += 1;
        return undefined;
      },
    });
    await expect(
      runWithLease(refused, { name: 'refused', ttlMs: 3_000, killGraceMs: 500 }, async () => 0, silentLogger),
    ).rejects.toThrow(/ECONNREFUSED/);
    expect(asked).toBe(0);
  });

  it('a run that waits and finds its own unanswered acquisition holding the lease takes it up: same generation and attempt', async () => {
    const s = await make();
    // 1: busy, and the holder finishes meanwhile; 2: ours, answer lost; 3: held by ourselves.
    const lossy = await lostAfterHolderFinishes(s, 'adopt');
    const seen: string[] = [];
    const r = await runWithLease(
      lossy,
      { name: 'adopt', ttlMs: 30_000, killGraceMs: 500, window: { key: 'd' }, onBusy: 'wait' },
      async (ctx) => {
        seen.push(`${ctx.fenceToken}/${ctx.attempt}`);
        return 0;
      },
      silentLogger,
    );
    const held = await firstToken(s, 'adopt');
    expect(r).toMatchObject({ status: 'completed', generation: after(held), attempt: 1 });
    expect(seen).toEqual([`${r.generation}/1`]);
    const kinds = (await s.readHistory('adopt', 100)).map((e) => e.kind);
    // Not waited out as a stale owner's (30 s), taken over, or counted lost.
    expect(kinds).toEqual(['acquired', 'released', 'acquired', 'window-claimed', 'window-completed', 'released']);
    // A generation that no longer holds the lease is not taken up.
    expect(
      await s.adopt!({
        job: 'adopt',
        owner: base.owner,
        generation: r.generation!,
        window: 'd',
        ttlMs: 3_000,
        lockTimeoutMs: 500,
        answerTimeoutMs: 1_000,
      }),
    ).toBeUndefined();
  });

  it('a lost lease counts once: whether its owner or the next acquisition says so first; an abandoned window is marked lost', async () => {
    const s = await make();
    // The owner reaches the database after its lease expired: it records the loss itself.
    const g1 = (await s.acquire({ ...base, job: 'l', ttlMs: 1_500, renewIntervalMs: 500, window: 'd1' })).generation!;
    expect((await readJobStates(s, 'l')).jobs[0]!.openWindows).toMatchObject([{ window: 'd1', outcome: 'running' }]);
    await new Promise((r) => setTimeout(r, 1_700));
    // Still recorded as running, but nobody holds it: status says so.
    expect((await readJobStates(s, 'l')).jobs[0]!.openWindows).toMatchObject([
      { window: 'd1', outcome: 'abandoned', generation: Number(g1) },
    ]);
    expect(
      (
        await s.finish({
          job: 'l',
          owner: base.owner,
          generation: g1,
          window: 'd1',
          outcome: 'failed',
          hostTime: new Date(),
        })
      ).held,
    ).toBe(false);
    // The next run, for the next occurrence: a takeover (never released), but no second loss.
    const next = await s.acquire({
      ...base,
      job: 'l',
      owner: 'host-b:2:bbbb',
      ttlMs: 1_500,
      renewIntervalMs: 500,
      window: 'd2',
    });
    expect(next).toMatchObject({ outcome: 'acquired', generation: after(g1) });
    // That owner never comes back (cut off, killed): the run after it records its loss, and
    // its window, another occurrence, no longer reads as running.
    await new Promise((r) => setTimeout(r, 1_700));
    expect(await s.acquire({ ...base, job: 'l', owner: 'host-c:3:cccc', window: 'd3' })).toMatchObject({
      outcome: 'acquired',
      generation: after(next.generation),
    });
    const lost = (await s.readHistory('l', 100)).filter((e) => e.kind === 'lease-lost');
    expect(lost.map((e) => [e.generation, e.window, e.host])).toEqual([
      [g1, 'd1', 'host-a'],
      [next.generation, 'd2', 'host-b'],
    ]);
    const { rows } = await s.readJobRows('l');
    expect(rows[0]!.openWindows.map((w) => [w.window, w.outcome])).toEqual([
      ['d1', 'lost'],
      ['d2', 'lost'],
      ['d3', 'running'],
    ]);
  });

  it('due-window reads: one key per distinct schedule, zone, format, offset, alert and lookback; each job of a key gets back its due windows that are not final', async () => {
    const s = await make();
    const hourly = { schedule: '0 * * * *', tz: 'UTC', window_mode: 'schedule' };
    const register = (name: string, spec: Record<string, string | number | null>, key: string, ok = true) =>
      runWithLease(
        s,
        { name, ttlMs: 3_000, killGraceMs: 500, window: { key }, spec },
        async () => {
          if (!ok) throw new Error('failed');
          return 0;
        },
        silentLogger,
      );
    await register('due-a', hourly, 'k1');
    await register('due-b', hourly, 'k0'); // same key as due-a, another window
    await register('due-c', { ...hourly, tz: null, window_format: 'yyyy-MM-dd', alert_after_ms: 60_000 }, 'k1');
    await register('due-d', { ...hourly, window_mode: 'literal' }, 'k1'); // not from the schedule: never judged
    await register('due-e', { ...hourly, alert_lookback_ms: 7_200_000 }, 'k1', false); // failed: not final

    const { dbNow, keys } = await s.readScheduleKeys();
    expect(Math.abs(dbNow.getTime() - Date.now())).toBeLessThan(5_000);
    const ab = {
      schedule: '0 * * * *',
      tz: 'UTC',
      windowFormat: null,
      windowOffset: null,
      alertAfterMs: null,
      alertLookbackMs: null,
    };
    const c = {
      schedule: '0 * * * *',
      tz: null,
      windowFormat: 'yyyy-MM-dd',
      windowOffset: null,
      alertAfterMs: 60_000,
      alertLookbackMs: null,
    };
    const e = { ...ab, alertLookbackMs: 7_200_000 };
    expect(keys).toHaveLength(3);
    expect(keys).toEqual(expect.arrayContaining([ab, c, e]));
    expect((await s.readScheduleKeys('due-c')).keys).toEqual([c]);
    expect((await s.readScheduleKeys('due-d')).keys).toEqual([]);

    // Windows before a job's registration count only when a run claimed them (a row).
    const old = new Date(Date.now() - 86_400_000);
    const w = (window: string, scheduledAt = old) => ({ window, scheduledAt });
    const open = (groups: Parameters<typeof s.readDueNotCompleted>[0], name?: string) =>
      s.readDueNotCompleted(groups, name).then((x) => x.map((r) => `${r.job}:${r.window}:${r.outcome ?? '-'}`).sort());
    expect(await open([{ ...ab, windows: [w('k0'), w('k1'), w('k2', new Date(Date.now() + 60_000))] }])).toEqual([
      'due-a:k2:-',
      'due-b:k2:-',
    ]);
    expect(await open([{ ...ab, windows: [w('k0'), w('k1')] }], 'due-b')).toEqual([]);
    expect(await open([{ ...c, windows: [w('k0'), w('k1')] }])).toEqual([]);
    expect(await open([{ ...e, windows: [w('k1')] }])).toEqual(['due-e:k1:failed']);
    // A key that differs in one field only (here the alert) matches no job.
    expect(await open([{ ...c, alertAfterMs: null, windows: [w('k9', new Date(Date.now() + 60_000))] }])).toEqual([]);
    // The +00:00 spelling of a UTC window completes it too.
    expect(
      await open([{ ...ab, windows: [{ window: 'k5', legacy: 'k1', scheduledAt: new Date(Date.now() + 60_000) }] }]),
    ).toEqual(['due-b:k5:-']);
    expect(await open([])).toEqual([]);
    // Many not final: the oldest ten and the latest are listed, the count says how many in all.
    const many = Array.from({ length: 14 }, (_, i) =>
      w(`m${String(i).padStart(2, '0')}`, new Date(Date.now() + 60_000 + i)),
    );
    const listed = await s.readDueNotCompleted([{ ...e, windows: many }]);
    expect(listed.map((r) => r.window)).toEqual([...many.slice(0, 10), many[13]!].map((x) => x.window));
    expect(new Set(listed.map((r) => r.count))).toEqual(new Set([14]));
  });

  it('tokens: decimal strings of a bigint, epoch * 10^12 + n, strictly increasing per job; epoch 0 on a history that never changed', async () => {
    const s = await make();
    const tokens: bigint[] = [];
    for (let i = 0; i < 3; i++) {
      const a = await s.acquire({ ...base, job: 'tok' });
      expect(a.generation).toMatch(/^[1-9][0-9]{0,18}$/);
      tokens.push(BigInt(a.generation!));
      expect(
        (
          await s.finish({
            job: 'tok',
            owner: base.owner,
            generation: a.generation!,
            outcome: 'none',
            hostTime: new Date(),
          })
        ).held,
      ).toBe(true);
    }
    // PostgreSQL: 1, 2, 3 within a server start; the embedded store: the clock at each acquisition.
    if (s.kind === 'sqlite') expect(tokens[0]! < tokens[1]! && tokens[1]! < tokens[2]!).toBe(true);
    else expect(tokens).toEqual([1n, 2n, 3n]);
    for (const t of tokens) expect(t).toBeLessThanOrEqual(9_223_372_036_854_775_807n);
  });

  it('reports its replication setup without failing: the embedded store none, a lone PostgreSQL server no standby', async () => {
    const s = await make();
    const r = await s.readReplication!();
    expect(r.mode).toBe(s.kind === 'sqlite' ? 'embedded' : 'single');
    expect(r.fenceEpoch).toBe(0);
    expect(r.unchecked).toEqual([]);
  });

  it('a sequence under one lease: windows claimed, finished without releasing, missed recorded, then one release', async () => {
    const s = await make();
    const acquired = await s.acquire({
      ...base,
      job: 'seq',
      spec: { schedule: '* * * * *', tz: 'UTC', window_mode: 'schedule' },
    });
    expect(acquired).toMatchObject({ outcome: 'acquired' });
    const lease = { job: 'seq', owner: base.owner, generation: acquired.generation! };
    const claim = (window: string, more: Partial<Parameters<NonNullable<LeaseStore['claimWindow']>>[0]> = {}) =>
      s.claimWindow!({ ...lease, window, rerun: false, hostTime: new Date(), detail: { catch_up: true }, ...more });
    expect(await claim('a', { scheduledAt: new Date(Date.now() - 60_000) })).toMatchObject({
      outcome: 'claimed',
      attempt: 1,
    });
    const done = {
      ...lease,
      window: 'a',
      outcome: 'completed' as const,
      exitCode: 0,
      hostTime: new Date(),
      detail: { attempt: 1 },
    };
    expect(await s.finishWindow!(done)).toMatchObject({ held: true });
    // Safe to repeat: the retry of an attempt that committed changes nothing.
    expect(await s.finishWindow!(done)).toMatchObject({ held: true });
    expect(await claim('a')).toMatchObject({ outcome: 'done' });
    expect(await claim('a', { rerun: true })).toMatchObject({ outcome: 'claimed', attempt: 2 });
    expect(await s.finishWindow!({ ...done, detail: { attempt: 2 } })).toMatchObject({ held: true });
    expect(await claim('b')).toMatchObject({ outcome: 'claimed', attempt: 1 });
    expect(await s.finishWindow!({ ...done, window: 'b', outcome: 'failed', exitCode: 3 })).toMatchObject({
      held: true,
    });
    expect(await claim('old', { scheduledAt: new Date(Date.now() - 3_600_000), maxDelayMs: 60_000 })).toMatchObject({
      outcome: 'missed',
    });
    // A final window is left alone; an open one (b, failed) and a new one (c) are recorded missed.
    expect(
      await s.recordMissed!({
        ...lease,
        windows: [{ key: 'a' }, { key: 'b' }, { key: 'c', scheduledAt: new Date() }],
        reason: 'catch-up-limit',
        hostTime: new Date(),
      }),
    ).toBe(2);
    expect(
      await s.recordMissed!({ ...lease, windows: [{ key: 'c' }], reason: 'catch-up-limit', hostTime: new Date() }),
    ).toBe(0);
    const states = await s.readWindows!('seq', ['a', 'b', 'c', 'old', 'none']);
    expect(states.registeredAt).toBeInstanceOf(Date);
    expect(
      Object.fromEntries([...states.windows].map(([k, v]) => [k, [v.outcome, v.completedAt !== null, v.attempts]])),
    ).toEqual({
      a: ['completed', true, 2],
      b: ['missed', false, 1],
      c: ['missed', false, 0],
      old: ['missed', false, 0],
    });
    expect((await s.readWindows!('never-registered', ['a'])).registeredAt).toBeUndefined();
    // Another owner holds nothing: it can claim, finish and record nothing.
    const other = { job: 'seq', owner: 'host-b:2:bbbb', generation: lease.generation };
    expect(await s.claimWindow!({ ...other, window: 'd', rerun: false, hostTime: new Date() })).toMatchObject({
      outcome: 'not-held',
    });
    expect(
      await s.recordMissed!({ ...other, windows: [{ key: 'd' }], reason: 'catch-up-limit', hostTime: new Date() }),
    ).toBeUndefined();
    expect(await s.finish({ ...lease, outcome: 'none', hostTime: new Date() })).toMatchObject({ held: true });
    expect(await claim('e')).toMatchObject({ outcome: 'not-held' });
    const kinds = (await s.readHistory('seq', 100)).map((e) => e.kind);
    expect(kinds).toEqual([
      'acquired',
      'window-claimed',
      'window-completed',
      'window-claimed',
      'window-completed',
      'window-claimed',
      'window-failed',
      'window-missed',
      'window-missed',
      'window-missed',
      'released',
    ]);
    const claimed = (await s.readHistory('seq', 100)).find((e) => e.kind === 'window-claimed');
    expect(claimed?.detail).toMatchObject({ catch_up: true, attempt: 1 });
    expect((await s.readJobRows('seq')).rows[0]).toMatchObject({ held: false, openCount: 3 });
  });

  it('occurrences counted as history judges them: by the latest claim, and those only skipped by their latest skip', async () => {
    const s = await make();
    const spec = { spec: { schedule: '* * * * *', tz: 'UTC', window_mode: 'schedule' } };
    const a = await s.acquire({ ...base, job: 'occ', ...spec });
    const lease = { job: 'occ', owner: base.owner, generation: a.generation! };
    const run = async (window: string, detail: Record<string, unknown>) => {
      expect(await s.claimWindow!({ ...lease, window, rerun: true, hostTime: new Date(), detail })).toMatchObject({
        outcome: 'claimed',
      });
      await s.finishWindow!({ ...lease, window, outcome: 'completed', exitCode: 0, hostTime: new Date() });
    };
    await run('bf', { backfill: true, role: 'backfill' });
    await run('cu', { role: 'catch-up' });
    await run('own', { role: 'current' });
    await run('bf-cu', { backfill: true });
    await run('bf-cu', { role: 'catch-up' });
    await s.finish({ ...lease, outcome: 'none', hostTime: new Date() });
    // A plain rerun of the backfilled window: the latest claim says how it ran.
    const r = await s.acquire({ ...base, job: 'occ', window: 'bf', rerun: true });
    await s.finish({ ...lease, generation: r.generation!, window: 'bf', outcome: 'completed', hostTime: new Date() });
    const skip = (kind: string, window: string) => s.recordEvent({ job: 'occ', kind, window, hostTime: new Date() });
    await skip('busy-skip', 'x');
    await skip('backoff-skip', 'x');
    await skip('replaced-skip', 'y');
    await skip('busy-skip', 'z');
    await skip('busy-skip', 'z');
    await skip('busy-skip', 'cu'); // has a row: counted by it
    const counts = Object.fromEntries((await s.readOccurrenceCounts!('occ')).map((c) => [c.reason, c.n]));
    expect(counts).toEqual({
      completed: 2,
      'caught-up': 2,
      'skipped-backoff': 1,
      'skipped-replaced': 1,
      'skipped-busy': 1,
    });
    const judged: Record<string, number> = {};
    for (const o of await readOccurrences(s, 'occ', 100)) judged[o.reason] = (judged[o.reason] ?? 0) + 1;
    expect(judged).toEqual(counts);
    expect((await s.readOccurrenceCounts!()).filter((c) => c.job === 'occ').length).toBe(5);
    // The status page's grid reads the same occurrences for a time range, several jobs at once.
    const from = new Date(Date.now() - 3_600_000);
    const to = new Date(Date.now() + 3_600_000);
    const between = await s.readOccurrencesBetween!(['occ', 'no-such-job'], from, to, 100);
    const inRange: Record<string, number> = {};
    for (const o of between) inRange[o.reason] = (inRange[o.reason] ?? 0) + 1;
    expect(inRange).toEqual(counts);
    expect(new Set(between.map((o) => o.job))).toEqual(new Set(['occ']));
    for (const o of between) expect(o.at >= from && o.at < to, o.window).toBe(true);
    // At most perJob windows of a job (its latest); a range with nothing in it reads nothing.
    const capped = await s.readOccurrencesBetween!(['occ'], from, to, 2);
    expect(capped.filter((o) => o.generation !== null)).toHaveLength(2);
    expect(await s.readOccurrencesBetween!(['occ'], new Date(0), new Date(1000), 100)).toEqual([]);
  });

  it.runIf(_kind === 'postgresql')(
    'a schema before 026 (no windows.claimed_as) still counts: caught up as completed',
    async () => {
      const s = (await make()) as PgStore;
      await s.pool.query(`ALTER TABLE "${s.schema}".windows DROP COLUMN claimed_as`);
      await s.acquire({ ...base, job: 'old', spec: { schedule: '* * * * *', tz: 'UTC', window_mode: 'schedule' } });
      expect(await s.readOccurrenceCounts!('old')).toEqual([]);
      await s.pool.query(
        `INSERT INTO "${s.schema}".windows (job, window_key, owner, generation, outcome, completed_at)
       VALUES ('old', 'cu', 'h', 1, 'completed', now())`,
      );
      expect(await s.readOccurrenceCounts!('old')).toEqual([{ job: 'old', reason: 'completed', n: 1 }]);
    },
  );

  it('records a missed window past max delay without taking the lease', async () => {
    const s = await make();
    const r = await s.acquire({
      ...base,
      job: 'm',
      window: 'old',
      scheduledAt: new Date(Date.now() - 3_600_000),
      maxDelayMs: 60_000,
    });
    expect(r.outcome).toBe('missed');
    expect((await s.readJobRows('m')).rows[0]).toMatchObject({
      generation: null,
      openWindows: [{ window: 'old', attempts: 0, outcome: 'missed' }],
    });
  });

  it('events are gap-free per job, counted, and status reads the same shape', async () => {
    const s = await make();
    for (const key of ['a', 'b', 'c']) {
      await runWithLease(
        s,
        {
          name: 'e',
          ttlMs: 3_000,
          killGraceMs: 500,
          window: { key },
          spec: { schedule: '0 * * * *', tz: 'UTC', window_mode: 'literal' },
        },
        async () => 1,
        silentLogger,
      );
    }
    const seqs = (await s.readHistory('e', 100)).map((e) => Number(e.seq));
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    expect(seqs).toHaveLength(12);
    const counts = await s.readEventCounts(['window-completed', 'released']);
    expect(counts.filter((c) => c.job === 'e' && c.kind === 'window-completed').reduce((n, c) => n + c.n, 0)).toBe(3);
    expect(counts.filter((c) => c.job === 'e' && c.kind === 'released').reduce((n, c) => n + c.n, 0)).toBe(3);
    expect(new Set(counts.map((c) => c.kind))).toEqual(new Set(['window-completed', 'released'])); // only the kinds asked for
    const { jobs } = await readJobStates(s, 'e');
    expect(jobs[0]).toMatchObject({
      name: 'e',
      schedule: '0 * * * *',
      generation: [...(await s.readHistory('e', 100))].reverse().find((e) => e.kind === 'acquired')!.generation,
      held: false,
      lastWindow: 'c',
      openWindows: [],
    });
    expect(jobs[0]!.lastDurationMs).toBeGreaterThanOrEqual(0);
  });

  it('retention: the horizon refuses an older occurrence, final windows before it go (never the latest completed, never an open one), events go as a prefix', async () => {
    const s = await make();
    const r = s.retention!;
    const at = (minutes: number): Date => new Date(Date.now() - minutes * 60_000);
    // w1, w2 completed, w3 failed (open), w4 completed (the latest), all scheduled long ago.
    for (const [key, ok] of [
      ['w1', true],
      ['w2', true],
      ['w3', false],
      ['w4', true],
    ] as const) {
      const a = await s.acquire({ ...base, job: 'r', window: key, scheduledAt: at(600) });
      expect(a.outcome).toBe('acquired');
      await s.finish({
        job: 'r',
        owner: base.owner,
        generation: a.generation!,
        window: key,
        outcome: ok ? 'completed' : 'failed',
        exitCode: ok ? 0 : 1,
        hostTime: new Date(),
      });
    }
    const { dbNow, jobs } = await r.read('r');
    expect(jobs).toMatchObject([{ name: 'r', retainedFrom: null, prunedThroughSeq: 0, prunedWindows: 0 }]);
    const horizon = new Date(dbNow.getTime() - 60_000);
    expect(await r.countPrunable('r', horizon, new Date(dbNow.getTime() + 60_000))).toEqual({ events: 16, windows: 2 });
    await r.raiseHorizon(['r'], horizon);
    await r.raiseHorizon(['r'], new Date(horizon.getTime() - 3_600_000)); // never moves back
    expect((await r.read('r')).jobs[0]!.retainedFrom).toEqual(horizon);
    expect(await r.pruneWindows('r', horizon, 1)).toEqual({ deleted: 1, more: true });
    expect(await r.pruneWindows('r', horizon, 10)).toEqual({ deleted: 1, more: false });
    const open = (await s.readJobRows('r')).rows[0]!;
    expect(open).toMatchObject({ lastWindow: 'w4', openWindows: [{ window: 'w3', outcome: 'failed' }] });
    // Events: a prefix, stopping at the first one written at or after `before`.
    expect(await r.pruneEvents('r', new Date(dbNow.getTime() + 60_000), 10)).toEqual({
      deleted: 10,
      throughSeq: 10,
      more: true,
    });
    expect(await r.pruneEvents('r', new Date(dbNow.getTime() + 60_000), 10)).toEqual({
      deleted: 6,
      throughSeq: 16,
      more: false,
    });
    expect(await s.readHistory('r', 100)).toEqual([]);
    expect((await r.read('r')).jobs[0]).toMatchObject({ prunedThroughSeq: 16, prunedWindows: 2 });
    // A late duplicate of an occurrence before the horizon: missed, no lease taken; --rerun runs it.
    expect((await s.acquire({ ...base, job: 'r', window: 'w1', scheduledAt: at(600) })).outcome).toBe('missed');
    expect((await s.acquire({ ...base, job: 'r', window: 'w5', scheduledAt: at(0.5) })).outcome).toBe('acquired');
    expect((await s.readHistory('r', 100)).map((e) => [Number(e.seq), e.kind])).toEqual([
      [17, 'window-missed'],
      [18, 'acquired'],
      [19, 'window-claimed'],
    ]);
  });

  // Versions, not last-write-wins (seed 003; sql/012_versions_pause_mark.sql).
  const scheduled = {
    schedule: '* * * * *',
    tz: 'UTC',
    window_mode: 'schedule',
    window_format: null,
    window_offset: null,
    max_delay_ms: null,
    alert_after_ms: null,
  };
  const manual = {
    schedule: null,
    tz: 'UTC',
    window_mode: 'literal',
    window_format: null,
    window_offset: null,
    max_delay_ms: null,
    alert_after_ms: null,
  };
  const op = { by: 'ops@console', hostTime: new Date() };
  const job = async (s: LeaseStore, name: string) => (await s.readJobRows(name)).rows[0]!;

  it('registry: a manual run never erases a registered schedule; a differing schedule is adopted, bumps the version and is a job-changed event', async () => {
    const s = await make();
    const first = await s.acquire({ ...base, job: 'reg', window: 'w1', spec: scheduled });
    expect(first.jobChanged).toBeUndefined();
    await s.finish({
      job: 'reg',
      owner: base.owner,
      generation: first.generation!,
      window: 'w1',
      outcome: 'completed',
      hostTime: new Date(),
    });
    expect(await job(s, 'reg')).toMatchObject({ schedule: '* * * * *', windowMode: 'schedule', version: 1 });
    const m = await s.acquire({ ...base, job: 'reg', window: 'manual-test', spec: manual });
    expect(m.jobChanged).toBeUndefined();
    await s.finish({
      job: 'reg',
      owner: base.owner,
      generation: m.generation!,
      window: 'manual-test',
      outcome: 'completed',
      hostTime: new Date(),
    });
    expect(await job(s, 'reg')).toMatchObject({ schedule: '* * * * *', windowMode: 'schedule', version: 1 });
    const other = await s.acquire({
      ...base,
      owner: 'host-b:2:bbbb',
      job: 'reg',
      window: 'w2',
      spec: { ...scheduled, schedule: '*/5 * * * *' },
    });
    expect(other.jobChanged).toMatchObject({
      old: { schedule: '* * * * *' },
      new: { schedule: '*/5 * * * *' },
      version: 2,
    });
    expect(await job(s, 'reg')).toMatchObject({ schedule: '*/5 * * * *', version: 2, recentJobChanges: 1 });
    const changed = (await s.readHistory('reg', 100)).filter((e) => e.kind === 'job-changed');
    expect(changed).toHaveLength(1);
    expect(changed[0]).toMatchObject({
      host: 'host-b',
      owner: 'host-b:2:bbbb',
      detail: { old: { schedule: '* * * * *' }, new: { schedule: '*/5 * * * *' }, version: 2 },
    });
  });

  it('pause and resume: compare-and-set on the version, each an event; a paused job records its occurrence skipped (final) and takes no lease', async () => {
    const s = await make();
    await runWithLease(
      s,
      { name: 'p', ttlMs: 3_000, killGraceMs: 500, window: { key: 'k0' }, spec: scheduled },
      async () => 0,
      silentLogger,
    );
    const v = (await job(s, 'p')).version;
    expect(await s.pause({ ...op, job: 'p', expectVersion: v + 1, reason: 'stale' })).toMatchObject({
      status: 'conflict',
      version: v,
      seq: null,
    });
    expect(await job(s, 'p')).toMatchObject({ paused: false, version: v });
    expect(await s.pause({ ...op, job: 'nope', reason: 'x' })).toMatchObject({ status: 'unknown' });
    expect(await s.pause({ ...op, job: 'p', expectVersion: v, until: new Date(Date.now() - 60_000) })).toMatchObject({
      status: 'bad-until',
      version: v,
    });
    const paused = await s.pause({ ...op, job: 'p', expectVersion: v, reason: 'db maintenance' });
    expect(paused).toMatchObject({ status: 'done', version: v + 1, pausedUntil: null });
    expect(await job(s, 'p')).toMatchObject({
      paused: true,
      version: v + 1,
      pause: { reason: 'db maintenance', by: 'ops@console', until: null },
    });
    const history = await s.readHistory('p', 100);
    expect(history.at(-1)).toMatchObject({
      seq: paused.seq,
      kind: 'paused',
      detail: { reason: 'db maintenance', by: 'ops@console', version: v + 1 },
    });

    const skipped = await s.acquire({ ...base, job: 'p', window: 'k1', spec: scheduled });
    expect(skipped).toMatchObject({ outcome: 'paused', generation: null });
    expect(await job(s, 'p')).toMatchObject({
      held: false,
      generation: await firstToken(s, 'p'),
      openWindows: [],
      lastWindow: 'k1',
    });
    expect((await s.readHistory('p', 1))[0]).toMatchObject({
      kind: 'paused-skip',
      window: 'k1',
      detail: { reason: 'db maintenance' },
    });
    // Final: a run of that occurrence after the pause skips it as done.
    expect(await s.resume({ ...op, job: 'p', expectVersion: v })).toMatchObject({ status: 'conflict', version: v + 1 });
    const resumed = await s.resume({ ...op, job: 'p' });
    expect(resumed).toMatchObject({ status: 'done', version: v + 2 });
    expect(await s.resume({ ...op, job: 'p' })).toMatchObject({ status: 'noop', version: v + 2 });
    expect(await job(s, 'p')).toMatchObject({ paused: false, pause: { reason: 'db maintenance' } });
    expect(await s.acquire({ ...base, job: 'p', window: 'k1', spec: scheduled })).toMatchObject({ outcome: 'done' });
    expect(await s.acquire({ ...base, job: 'p', window: 'k2', spec: scheduled })).toMatchObject({
      outcome: 'acquired',
    });
  });

  it('a pause with an end is over by itself on the store clock', async () => {
    const s = await make();
    await s.acquire({ ...base, job: 'pu', spec: scheduled });
    await s.release('pu', new Date());
    expect(await s.pause({ ...op, job: 'pu', untilMs: 1_000 })).toMatchObject({ status: 'done' });
    expect(await job(s, 'pu')).toMatchObject({ paused: true });
    expect(await s.acquire({ ...base, job: 'pu', window: 'a', spec: scheduled })).toMatchObject({ outcome: 'paused' });
    await waitFor('the pause to end on the store clock', async () => !(await job(s, 'pu')).paused);
    expect(await s.acquire({ ...base, job: 'pu', window: 'b', spec: scheduled })).toMatchObject({
      outcome: 'acquired',
    });
  });

  it('mark: refused while a live owner runs that window; otherwise final (a run skips it), an event, a version', async () => {
    const s = await make();
    const held = await s.acquire({ ...base, job: 'mk', window: 'w1', ttlMs: 30_000, spec: manual });
    const v = (await job(s, 'mk')).version;
    expect(await s.mark({ ...op, job: 'mk', window: 'w1', outcome: 'completed' })).toMatchObject({
      status: 'busy',
      holder: base.owner,
      holderGeneration: held.generation,
      version: v,
    });
    expect(await job(s, 'mk')).toMatchObject({ version: v, openWindows: [{ window: 'w1', outcome: 'running' }] });
    const other = await s.mark({ ...op, job: 'mk', window: 'w2', outcome: 'skipped', reason: 'holiday' });
    expect(other).toMatchObject({ status: 'done', version: v + 1, previousOutcome: null });
    expect(await s.mark({ ...op, job: 'mk', window: 'w3', outcome: 'completed', expectVersion: v })).toMatchObject({
      status: 'conflict',
      version: v + 1,
    });
    await s.finish({
      job: 'mk',
      owner: base.owner,
      generation: held.generation!,
      window: 'w1',
      outcome: 'failed',
      exitCode: 1,
      hostTime: new Date(),
    });
    const fixed = await s.mark({ ...op, job: 'mk', window: 'w1', outcome: 'completed', reason: 'fixed by hand' });
    expect(fixed).toMatchObject({ status: 'done', version: v + 2, previousOutcome: 'failed' });
    expect((await s.readHistory('mk', 1))[0]).toMatchObject({
      seq: fixed.seq,
      kind: 'window-marked',
      window: 'w1',
      detail: { outcome: 'completed', reason: 'fixed by hand', previous_outcome: 'failed' },
    });
    expect(await job(s, 'mk')).toMatchObject({ openWindows: [] });
    expect(await s.acquire({ ...base, job: 'mk', window: 'w1', spec: manual })).toMatchObject({ outcome: 'done' });
    expect(await s.acquire({ ...base, job: 'mk', window: 'w2', spec: manual })).toMatchObject({ outcome: 'done' });
  });

  it('releaseLease: a live holder only with force; a lease not held is nothing to do; compare-and-set', async () => {
    const s = await make();
    const held = await s.acquire({
      ...base,
      job: 'rl',
      window: 'w',
      ttlMs: 30_000,
      renewIntervalMs: 10_000,
      spec: manual,
    });
    const v = (await job(s, 'rl')).version;
    expect(await s.releaseLease({ ...op, job: 'rl', force: false })).toMatchObject({
      status: 'busy',
      live: true,
      holder: base.owner,
      holderWindow: 'w',
      version: v,
    });
    expect(await job(s, 'rl')).toMatchObject({ held: true });
    expect(await s.releaseLease({ ...op, job: 'rl', force: true, expectVersion: v + 5 })).toMatchObject({
      status: 'conflict',
      version: v,
    });
    const r = await s.releaseLease({ ...op, job: 'rl', force: true, expectVersion: v });
    expect(r).toMatchObject({ status: 'done', live: true, version: v + 1, holderGeneration: held.generation });
    expect(await job(s, 'rl')).toMatchObject({ held: false });
    expect((await s.readHistory('rl', 1))[0]).toMatchObject({
      seq: r.seq,
      kind: 'released',
      detail: { by: 'admin', operator: 'ops@console', forced: true },
    });
    expect(await s.releaseLease({ ...op, job: 'rl', force: false })).toMatchObject({ status: 'noop', version: v + 1 });
    // The owner's finish is not held: its outcome is not recorded.
    expect(
      await s.finish({
        job: 'rl',
        owner: base.owner,
        generation: held.generation!,
        window: 'w',
        outcome: 'completed',
        hostTime: new Date(),
      }),
    ).toMatchObject({ held: false });
  });
});
