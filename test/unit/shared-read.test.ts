// The exporter's shared read (src/monitor/shared-read.ts) and its body (scrape-body.ts), alone.
import { gunzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { acceptsGzip, ScrapeBody } from '../../src/monitor/scrape-body.js';
import { sharedRead } from '../../src/monitor/shared-read.js';

const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('sharedRead', () => {
  it('answers every call made while a read runs with that read, then starts the next', async () => {
    let reads = 0;
    let release!: () => void;
    const done: number[] = [];
    const read = sharedRead(
      () => new Promise<number>((r) => (release = () => r(++reads))),
      (served) => done.push(served),
    );
    const first = [read(), read(), read()];
    await turn(); // the read starts at the end of the loop's turn
    const late = read(); // while it runs
    release();
    expect(await Promise.all([...first, late])).toEqual([1, 1, 1, 1]);
    await turn();
    await turn();
    expect(done).toEqual([4]);
    const next = read();
    await turn();
    release();
    expect(await next).toBe(2);
  });

  it('goes on answering while each turn of the event loop brings calls (a flood taken up a few a turn), not after an idle one', async () => {
    let reads = 0;
    const read = sharedRead(async () => ++reads);
    expect(await read()).toBe(1);
    // The turns right after it ended, each with a call: still read 1.
    for (let i = 0; i < 5; i++) expect(await read()).toBe(1);
    // A turn without a call ends it: a lone scraper's next request reads again.
    await turn();
    await turn();
    expect(await read()).toBe(2);
  });

  it('gives its error to every call that shared it, and reads again after', async () => {
    let n = 0;
    const read = sharedRead(async () => {
      if (++n === 1) throw new Error('database unreachable');
      return n;
    });
    const [a, b] = [read(), read()];
    await expect(a).rejects.toThrow('database unreachable');
    await expect(b).rejects.toThrow('database unreachable');
    await turn();
    await turn();
    expect(await read()).toBe(2);
  });
});

describe('the scrape body', () => {
  it('gzips once, whoever asks', async () => {
    const body = new ScrapeBody('leasejob_up 1\n');
    const [a, b] = await Promise.all([body.gzip(), body.gzip()]);
    expect(a).toBe(b);
    expect(gunzipSync(a).toString()).toBe('leasejob_up 1\n');
  });

  it('takes gzip when the Accept-Encoding header does', () => {
    expect(acceptsGzip('gzip')).toBe(true);
    expect(acceptsGzip('deflate, gzip;q=0.5')).toBe(true);
    expect(acceptsGzip('*')).toBe(true);
    expect(acceptsGzip('gzip;q=0')).toBe(false);
    expect(acceptsGzip('identity')).toBe(false);
    expect(acceptsGzip(undefined)).toBe(false);
  });
});
