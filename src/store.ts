// The SQL the runner sends: one parameterized statement per step (acquire+claim, renew,
// finish+release, record an event), each a call to a function created by sql/001_init.sql.
import type pg from 'pg';
import { quoteIdent } from './names.js';

export type AcquireOutcome = 'acquired' | 'busy' | 'stale' | 'done' | 'missed';

export interface AcquireInput {
  job: string;
  owner: string;
  ttlMs: number;
  renewIntervalMs: number;
  window?: string | undefined;
  scheduledAt?: Date | undefined;
  rerun: boolean;
  maxDelayMs?: number | undefined;
  hostTime: Date;
  spec?: Record<string, string | number | null> | undefined;
}

export interface AcquireRow {
  outcome: AcquireOutcome;
  generation: string | null;
  attempt: number | null;
  dbNow: Date | null;
  holder: string | null;
  holderGeneration: string | null;
  holderWindow: string | null;
  expiresAt: Date | null;
  completedAt: Date | null;
}

export interface RenewRow {
  dbNow: Date;
  expiresAt: Date;
}

/**
 * How long acquire waits for the lease row when a fenced transaction holds it: short enough
 * that a contender facing a working owner still leaves within about a second.
 */
export const ACQUIRE_LOCK_TIMEOUT_MS = 500;

export type FinishOutcome = 'completed' | 'failed' | 'none';

export class Store {
  private readonly s: string;

  constructor(
    readonly pool: pg.Pool,
    readonly schema: string,
  ) {
    this.s = quoteIdent(schema);
  }

  async acquire(i: AcquireInput): Promise<AcquireRow> {
    const { rows } = await this.pool.query(
      `SELECT * FROM ${this.s}.acquire($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
      [i.job, i.owner, i.ttlMs, i.renewIntervalMs, i.window ?? null, i.scheduledAt ?? null, i.rerun,
        i.maxDelayMs ?? null, i.hostTime, i.spec ? JSON.stringify(i.spec) : null, ACQUIRE_LOCK_TIMEOUT_MS],
    );
    const r = rows[0];
    return {
      outcome: r.outcome,
      generation: r.generation,
      attempt: r.attempt,
      dbNow: r.db_now,
      holder: r.holder,
      holderGeneration: r.holder_generation,
      holderWindow: r.holder_window,
      expiresAt: r.expires_at,
      completedAt: r.completed_at,
    };
  }

  /** Undefined when the lease is no longer ours (taken, expired or released). */
  async renew(job: string, owner: string, generation: string, ttlMs: number, lockTimeoutMs: number, queryTimeoutMs: number): Promise<RenewRow | undefined> {
    const { rows } = await this.pool.query({
      text: `SELECT * FROM ${this.s}.renew($1, $2, $3, $4, $5)`,
      values: [job, owner, generation, ttlMs, lockTimeoutMs],
      // Client-side bound: a black-holed connection is dropped and the next renewal reconnects.
      query_timeout: queryTimeoutMs,
    } as pg.QueryConfig);
    const r = rows[0];
    return r ? { dbNow: r.db_now, expiresAt: r.expires_at } : undefined;
  }

  /** Record the window outcome (if still held) and release. held=false: the lease was not ours. */
  async finish(i: {
    job: string; owner: string; generation: string; window?: string | undefined; outcome: FinishOutcome;
    exitCode?: number | undefined; hostTime: Date; detail?: Record<string, unknown>; queryTimeoutMs?: number;
  }): Promise<{ held: boolean; dbNow: Date }> {
    const { rows } = await this.pool.query({
      text: `SELECT * FROM ${this.s}.finish($1, $2, $3, $4, $5, $6, $7, $8)`,
      values: [i.job, i.owner, i.generation, i.window ?? null, i.outcome, i.exitCode ?? null, i.hostTime,
        JSON.stringify(i.detail ?? {})],
      query_timeout: i.queryTimeoutMs,
    } as pg.QueryConfig);
    return { held: rows[0].held, dbNow: rows[0].db_now };
  }

  async recordEvent(e: {
    job: string; kind: string; window?: string | undefined; owner?: string | undefined; generation?: string | undefined;
    hostTime: Date; detail?: Record<string, unknown>;
  }): Promise<string> {
    const { rows } = await this.pool.query(
      `SELECT ${this.s}.record_event($1, $2, $3, $4, $5, $6, $7) AS seq`,
      [e.job, e.kind, e.window ?? null, e.owner ?? null, e.generation ?? null, e.hostTime, JSON.stringify(e.detail ?? {})],
    );
    return rows[0].seq;
  }

  /** Administrative release: expire now, keep the generation. */
  async release(job: string, hostTime: Date): Promise<{ owner: string; generation: string } | undefined> {
    const { rows } = await this.pool.query(
      `WITH r AS (
         UPDATE ${this.s}.leases SET expires_at = now(), released_at = now()
          WHERE name = $1 AND expires_at > now()
         RETURNING owner, generation, window_key)
       SELECT r.owner, r.generation,
              ${this.s}.record_event($1, 'released', r.window_key, r.owner, r.generation, $2, '{"by":"admin"}') AS seq
         FROM r`,
      [job, hostTime],
    );
    return rows[0] ? { owner: rows[0].owner, generation: rows[0].generation } : undefined;
  }
}
