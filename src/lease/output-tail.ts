// --record-output: the last N bytes of what the child wrote to stdout and stderr, as one tail
// in arrival order (as `2>&1` would show them), and the size the flag is given in.
import { UsageError } from '../errors.js';

/** Given without a size. */
export const DEFAULT_RECORD_OUTPUT_BYTES = 4 * 1024;
/** At most: a tail is kept per window in the ledger, and healthchecks.io logs 100 kB of a ping body. */
export const MAX_RECORD_OUTPUT_BYTES = 64 * 1024;

const UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1024,
  kb: 1000,
  kib: 1024,
  m: 1024 * 1024,
  mb: 1_000_000,
  mib: 1024 * 1024,
};

/** `4096`, `4KiB`, `4k`, `10kB`, `1MiB`: a whole number of bytes within the bound. */
export function parseRecordOutputSize(text: string | boolean | undefined): number | undefined {
  if (text === undefined || text === false) return undefined;
  if (text === true) return DEFAULT_RECORD_OUTPUT_BYTES;
  const m = /^\s*(\d+)\s*([a-z]*)\s*$/i.exec(text);
  const unit = m ? UNITS[m[2]!.toLowerCase()] : undefined;
  const bytes = m && unit !== undefined ? Number(m[1]) * unit : NaN;
  if (!Number.isSafeInteger(bytes) || bytes < 1 || bytes > MAX_RECORD_OUTPUT_BYTES) {
    throw new UsageError(
      `Expected \`--record-output\` to be a size from 1 byte to 64KiB (e.g. 4KiB, 16384), got \`${text}\`.`,
    );
  }
  return bytes;
}

/** What the child wrote: its last `limit` bytes and how many it wrote in all. */
export interface OutputTail {
  tail: Buffer;
  bytes: number;
}

/** Keeps the newest `limit` bytes of the chunks pushed to it; older chunks are dropped whole. */
export class TailBuffer {
  private chunks: Buffer[] = [];
  private held = 0;
  private total = 0;

  constructor(readonly limit: number) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    // A chunk bigger than the limit is cut now: the buffer never holds much more than `limit`.
    const c = chunk.length > this.limit ? chunk.subarray(chunk.length - this.limit) : chunk;
    this.chunks.push(c);
    this.held += c.length;
    while (this.chunks.length > 1 && this.held - this.chunks[0]!.length >= this.limit)
      this.held -= this.chunks.shift()!.length;
  }

  read(): OutputTail {
    const all = Buffer.concat(this.chunks);
    return { tail: all.subarray(Math.max(0, all.length - this.limit)), bytes: this.total };
  }
}

/** A UTF-8 continuation byte (10xxxxxx): never the first byte of a character. */
const continuation = (b: number | undefined): boolean => b !== undefined && (b & 0xc0) === 0x80;

/** `buf` from its first byte that starts a character (a cut tail may begin inside one). */
function fromCharStart(buf: Buffer): Buffer {
  let i = 0;
  while (i < 3 && continuation(buf[i])) i++;
  return buf.subarray(i);
}

/**
 * The last `limit` bytes of `buf` at most, as valid UTF-8 that starts on a character: a receiver
 * that decodes strictly (healthchecks.io answers 500 otherwise, and the ping is lost) gets text.
 * Bytes that are not UTF-8 (a binary child, a character cut off at the end) become U+FFFD.
 */
export function utf8Tail(buf: Buffer, limit: number): Buffer {
  const text = fromCharStart(buf.subarray(Math.max(0, buf.length - limit))).toString('utf8');
  const valid = Buffer.from(text, 'utf8');
  // A replacement character takes 3 bytes where it stood for 1: cut again, on a character.
  return valid.length <= limit ? valid : fromCharStart(valid.subarray(valid.length - limit));
}
