// The chaos suite's scrape-flood invariant (test/chaos/lib/scrape-flood.mjs) on recorded floods.
import { describe, expect, it } from 'vitest';
import { judgeScrapeFlood } from '../chaos/lib/scrape-flood.mjs';

const ok = { status: 200, up: 1, jobs: 4, whole: true, ms: 30 };
const flood = (answers: object[], legit: object = ok) => ({
  kind: 'scrape-flood',
  startedAt: Date.parse('2026-12-06T03:00:00Z'),
  endedAt: Date.parse('2026-12-06T03:00:01Z'),
  answers,
  legit,
});

describe('the chaos scrape-flood invariant', () => {
  it('holds when every answer is a whole exposition, up 1 with its jobs or up 0 (the last state, a fault under way)', () => {
    expect(judgeScrapeFlood([flood([ok, ok, { ...ok, up: 0, jobs: undefined }])])).toEqual({ 'scrapes-answer': [] });
  });

  it('is violated by an unanswered request, a cut body, a 500, a missing leasejob_up, or an exporter that never started', () => {
    const v = judgeScrapeFlood([
      flood([ok, { error: 'no answer in 60000 ms', ms: 60_000 }]),
      flood([{ ...ok, whole: false }]),
      flood([ok], { ...ok, status: 500 }),
      flood([{ ...ok, up: undefined }]),
      flood([{ ...ok, jobs: undefined }]),
      { kind: 'scrape-flood', startedAt: 0, endedAt: 0, startError: 'exporter exited 69' },
    ]);
    expect(v['scrapes-answer']).toHaveLength(6);
  });
});
