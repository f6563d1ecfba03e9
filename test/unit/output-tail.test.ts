// --record-output's size and tail, and the ping URL's suffixes and run id.
import { describe, expect, it } from 'vitest';
import { hookSecrets } from '../../src/cli/options.js';
import { parseRecordOutputSize, TailBuffer, utf8Tail } from '../../src/lease/output-tail.js';
import { pingTarget, runId } from '../../src/lease/run-hooks.js';

describe('--record-output', () => {
  it('reads sizes in bytes, k/KiB, kB, M/MiB; bare means 4KiB; off unless given', () => {
    expect(parseRecordOutputSize(undefined)).toBeUndefined();
    expect(parseRecordOutputSize(true)).toBe(4096);
    expect(parseRecordOutputSize('4096')).toBe(4096);
    expect(parseRecordOutputSize('16KiB')).toBe(16384);
    expect(parseRecordOutputSize('16k')).toBe(16384);
    expect(parseRecordOutputSize('10 kB')).toBe(10_000);
    expect(parseRecordOutputSize('64KiB')).toBe(65536);
    for (const bad of ['0', '65537', '1MiB', '4.5k', '4 kilobytes', '', 'k'])
      expect(() => parseRecordOutputSize(bad), bad).toThrow(/--record-output/);
  });

  it('keeps exactly the newest bytes, whatever the chunks', () => {
    const t = new TailBuffer(5);
    for (const c of ['ab', 'cdefgh', '', 'i', 'jk']) t.push(Buffer.from(c));
    expect(t.read().tail.toString()).toBe('ghijk');
    expect(t.read().bytes).toBe(11);
    const big = new TailBuffer(3);
    big.push(Buffer.from('0123456789'));
    expect(big.read()).toMatchObject({ bytes: 10 });
    expect(big.read().tail.toString()).toBe('789');
    expect(new TailBuffer(4).read().tail.length).toBe(0);
  });
});

describe('the ping body (utf8Tail)', () => {
  const strict = new TextDecoder('utf-8', { fatal: true });

  it('starts on a character, never inside one', () => {
    const e = Buffer.from('é'.repeat(5)); // c3 a9, five times
    expect(strict.decode(utf8Tail(e, 5))).toBe('éé');
    expect(strict.decode(utf8Tail(Buffer.from('a€b'), 3))).toBe('b'); // inside the 3-byte €
    expect(strict.decode(utf8Tail(Buffer.from('a😀'), 4))).toBe('😀');
    expect(strict.decode(utf8Tail(Buffer.from('plain'), 100))).toBe('plain');
  });

  it('is valid UTF-8 of at most the limit for any bytes (a seeded random sample)', () => {
    let seed = 18;
    const next = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) % 256;
    for (let n = 0; n < 2000; n++) {
      const bytes = Buffer.from(Array.from({ length: next() % 64 }, next));
      const limit = 1 + (next() % 40);
      const out = utf8Tail(bytes, limit);
      expect(out.length).toBeLessThanOrEqual(limit);
      expect(() => strict.decode(out), bytes.toString('hex')).not.toThrow();
    }
  });
});

describe('ping URLs', () => {
  it('appends the suffix to the path, keeps the query, adds the run id', () => {
    expect(pingTarget('https://hc-ping.com/abc', 'start', 'r1')).toBe('https://hc-ping.com/abc/start?rid=r1');
    // Success: the URL without a trailing slash (`/<key>/<slug>/` is a 404 at healthchecks.io).
    expect(pingTarget('https://hc-ping.com/abc/', '', 'r1')).toBe('https://hc-ping.com/abc?rid=r1');
    expect(pingTarget('https://hc-ping.com/key/slug/', '', undefined)).toBe('https://hc-ping.com/key/slug');
    expect(pingTarget('https://hc-ping.com/key/slug/', 'start', 'r1')).toBe(
      'https://hc-ping.com/key/slug/start?rid=r1',
    );
    expect(pingTarget('https://hc-ping.com/abc/', 'fail', 'r1')).toBe('https://hc-ping.com/abc/fail?rid=r1');
    expect(pingTarget('https://hc-ping.com/key/slug?create=1', '3', undefined)).toBe(
      'https://hc-ping.com/key/slug/3?create=1',
    );
  });

  it('run ids are version 4 UUIDs, each new', () => {
    const ids = new Set(Array.from({ length: 100 }, runId));
    expect(ids.size).toBe(100);
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('the secrets to mask: the URL, its path, and a long key in it', () => {
    const s = hookSecrets(['https://hc-ping.com/0c6e4f8a-1b1e-4d84-9a36-6d1f0e2b7a11', undefined]);
    expect(s).toEqual(
      expect.arrayContaining([
        'https://hc-ping.com/0c6e4f8a-1b1e-4d84-9a36-6d1f0e2b7a11',
        '/0c6e4f8a-1b1e-4d84-9a36-6d1f0e2b7a11',
        '0c6e4f8a-1b1e-4d84-9a36-6d1f0e2b7a11',
      ]),
    );
    expect(hookSecrets(['https://h.example/hook?token=abc'])).toEqual(expect.arrayContaining(['token=abc']));
  });
});
