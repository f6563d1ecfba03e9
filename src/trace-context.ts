// W3C trace context of an occurrence: its trace id derived from the job and the window key (so every
// attempt, on any host, and any catch-up or backfill of it shares one trace), each attempt's span id
// derived from its fencing token and attempt number, and the `traceparent` a child is given.
//
// Derived, not random: `history`, the status page and a webhook's reader compute the same ids from
// what they already have, with nothing stored. SHA-256 in plain JavaScript because node:crypto is
// kept off the run path (docs/performance.md); it hashes a few dozen bytes per attempt.

/** What is hashed before the job and the window: a version, so the derivation can change without collisions. */
const TRACE_PREFIX = 'leasejob-trace-v1';
const SPAN_PREFIX = 'leasejob-span-v1';
const ROOT_PREFIX = 'leasejob-root-v1';

/** The occurrence's trace id: 32 hex digits, the first 16 bytes of SHA-256 over `prefix\0job\0window`. */
export function occurrenceTraceId(job: string, window: string): string {
  return nonZero(hex(sha256(utf8(`${TRACE_PREFIX}\u0000${job}\u0000${window}`)).subarray(0, 16)));
}

/**
 * A run without a window (`run` with no schedule nor --window) has no occurrence: its trace is
 * its ownership's, derived from the job and the fencing token.
 */
export function ownershipTraceId(job: string, generation: string): string {
  return nonZero(hex(sha256(utf8(`${TRACE_PREFIX}\u0000${job}\u0000\u0000${generation}`)).subarray(0, 16)));
}

/** The trace of a window's occurrence, or of a windowless run's ownership. */
export function traceIdOf(job: string, window: string | undefined | null, generation: string): string {
  return window === undefined || window === null ? ownershipTraceId(job, generation) : occurrenceTraceId(job, window);
}

/** One attempt's span id: 16 hex digits from the job, the window, the fencing token and the attempt number. */
export function attemptSpanId(
  job: string,
  window: string | undefined | null,
  generation: string,
  attempt: number,
): string {
  const text = `${SPAN_PREFIX}\u0000${job}\u0000${window ?? ''}\u0000${generation}\u0000${attempt}`;
  return nonZero(hex(sha256(utf8(text)).subarray(0, 8)));
}

/**
 * The root span of an occurrence's trace (every attempt's parent): 16 hex digits, the first 8 bytes
 * of SHA-256 over `leasejob-root-v1\0job\0window`, derived as the trace id is, so that each run,
 * on any host, names the same parent without asking anyone. A windowless run's root is its
 * ownership's: the window left empty and the fencing token after a second NUL.
 */
export function rootSpanId(job: string, window: string | undefined | null, generation: string): string {
  const text =
    window === undefined || window === null
      ? `${ROOT_PREFIX}\u0000${job}\u0000\u0000${generation}`
      : `${ROOT_PREFIX}\u0000${job}\u0000${window}`;
  return nonZero(hex(sha256(utf8(text)).subarray(0, 8)));
}

/** `00-<trace>-<span>-01`: version 00, sampled. */
export function traceparent(traceId: string, spanId: string): string {
  return `00-${traceId}-${spanId}-01`;
}

/** A W3C `traceparent` read back (version 00 only), or undefined when it is not one. */
export function parseTraceparent(value: string | undefined): { traceId: string; spanId: string } | undefined {
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/.exec(value?.trim() ?? '');
  if (!m || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return undefined;
  return { traceId: m[1]!, spanId: m[2]! };
}

// All zeros is the invalid id (W3C): a one in 2^64 or 2^128 chance, mapped to a fixed valid one.
const nonZero = (id: string): string => (/^0+$/.test(id) ? `${id.slice(0, -1)}1` : id);

const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);

function hex(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += b.toString(16).padStart(2, '0');
  return s;
}

const K = Uint32Array.from([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);

const rotr = (x: number, n: number): number => (x >>> n) | (x << (32 - n));

/** SHA-256 (FIPS 180-4) of `data`; checked against node:crypto in test/unit/trace-context.test.ts. */
export function sha256(data: Uint8Array): Uint8Array {
  const h = Uint32Array.from([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  // The message, a 1 bit, zeros, and its length in bits as 64 bits big-endian, in 64-byte blocks.
  const blocks = Math.ceil((data.length + 9) / 64);
  const msg = new Uint8Array(blocks * 64);
  msg.set(data);
  msg[data.length] = 0x80;
  const view = new DataView(msg.buffer);
  view.setUint32(msg.length - 8, Math.floor(data.length / 0x20000000));
  view.setUint32(msg.length - 4, (data.length * 8) >>> 0);
  const w = new Uint32Array(64);
  for (let b = 0; b < blocks; b++) {
    for (let i = 0; i < 16; i++) w[i] = view.getUint32(b * 64 + i * 4);
    for (let i = 16; i < 64; i++) {
      const x = w[i - 15]!;
      const y = w[i - 2]!;
      const s0 = rotr(x, 7) ^ rotr(x, 18) ^ (x >>> 3);
      const s1 = rotr(y, 17) ^ rotr(y, 19) ^ (y >>> 10);
      w[i] = (w[i - 16]! + s0 + w[i - 7]! + s1) >>> 0;
    }
    let [a, bb, c, d, e, f, g, hh] = h as unknown as [number, number, number, number, number, number, number, number];
    for (let i = 0; i < 64; i++) {
      const t1 = (hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i]! + w[i]!) >>> 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & bb) ^ (a & c) ^ (bb & c))) >>> 0;
      hh = g;
      g = f;
      f = e;
      e = (d + t1) >>> 0;
      d = c;
      c = bb;
      bb = a;
      a = (t1 + t2) >>> 0;
    }
    const add = [a, bb, c, d, e, f, g, hh];
    for (let i = 0; i < 8; i++) h[i] = (h[i]! + add[i]!) >>> 0;
  }
  const out = new Uint8Array(32);
  const outView = new DataView(out.buffer);
  for (let i = 0; i < 8; i++) outView.setUint32(i * 4, h[i]!);
  return out;
}
