// The occurrence's trace context (src/trace-context.ts): the plain-JavaScript SHA-256 agrees with
// node:crypto, ids are derived (the same inputs give the same ids), valid and well formed.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  attemptSpanId,
  occurrenceTraceId,
  ownershipTraceId,
  parseTraceparent,
  rootSpanId,
  sha256,
  traceparent,
} from '../../src/trace-context.js';

const hexOf = (b: Uint8Array): string => Buffer.from(b).toString('hex');

describe('trace context', () => {
  it('computes SHA-256 as node:crypto does, across block boundaries and for non-ASCII text', () => {
    for (const len of [0, 1, 55, 56, 63, 64, 65, 119, 120, 200, 1000]) {
      const data = Buffer.from(Array.from({ length: len }, (_, i) => (i * 31 + len) & 0xff));
      expect(hexOf(sha256(data)), `length ${len}`).toBe(createHash('sha256').update(data).digest('hex'));
    }
    const text = Buffer.from('jöb\u00002026-12-06T01:05:00Z ✓', 'utf8');
    expect(hexOf(sha256(text))).toBe(createHash('sha256').update(text).digest('hex'));
  });

  it('derives the trace id from the job and the window: documented formula, stable, distinct per occurrence', () => {
    const id = occurrenceTraceId('nightly', '2026-12-06T01:00:00Z');
    const expected = createHash('sha256')
      .update('leasejob-trace-v1\u0000nightly\u00002026-12-06T01:00:00Z')
      .digest('hex')
      .slice(0, 32);
    expect(id).toBe(expected);
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(occurrenceTraceId('nightly', '2026-12-06T01:00:00Z')).toBe(id);
    expect(occurrenceTraceId('nightly', '2026-12-06T02:00:00Z')).not.toBe(id);
    expect(occurrenceTraceId('other', '2026-12-06T01:00:00Z')).not.toBe(id);
    // The separator keeps `a` + `b\0c` apart from `a\0b` + `c`.
    expect(ownershipTraceId('job', '7')).not.toBe(occurrenceTraceId('job', '7'));
  });

  it('gives each attempt its own span id and a well-formed traceparent', () => {
    const a1 = attemptSpanId('j', 'w', '12', 1);
    const a2 = attemptSpanId('j', 'w', '12', 2);
    const b1 = attemptSpanId('j', 'w', '13', 1);
    expect(new Set([a1, a2, b1]).size).toBe(3);
    expect(a1).toMatch(/^[0-9a-f]{16}$/);
    const tp = traceparent(occurrenceTraceId('j', 'w'), a1);
    expect(tp).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(parseTraceparent(tp)).toEqual({ traceId: occurrenceTraceId('j', 'w'), spanId: a1 });
    expect(parseTraceparent(`00-${'0'.repeat(32)}-${a1}-01`)).toBeUndefined();
    expect(parseTraceparent('garbage')).toBeUndefined();
  });

  it("derives the occurrence's root span id from the job and the window (a windowless run's from its fencing token)", () => {
    const id = rootSpanId('nightly', '2026-12-06T01:00:00Z', '42');
    const expected = createHash('sha256')
      .update('leasejob-root-v1\u0000nightly\u00002026-12-06T01:00:00Z')
      .digest('hex')
      .slice(0, 16);
    expect(id).toBe(expected);
    // The same for every attempt of the occurrence, whatever its fencing token.
    expect(rootSpanId('nightly', '2026-12-06T01:00:00Z', '43')).toBe(id);
    expect(rootSpanId('nightly', undefined, '42')).not.toBe(rootSpanId('nightly', undefined, '43'));
    expect(rootSpanId('nightly', undefined, '42')).toMatch(/^[0-9a-f]{16}$/);
  });
});
