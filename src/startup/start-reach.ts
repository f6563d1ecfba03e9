// How much of its command this start ran, for the code cache (src/startup/compile-cache.ts). V8's cache
// holds the functions the start that wrote it compiled: one written by a start that stopped
// early (a database not yet migrated, a busy lease, the image's priming run against a closed
// port) lacks the rest of the path, and every later start would compile that part again. A
// start that ran further rewrites it, keeping what it held (its functions were compiled too).

/** Ordered: a cache is rewritten only by a start that reached further than its writer. */
export const Reach = {
  /** Stopped before its work: bad input, an unreachable or unmigrated database. */
  none: 0,
  /** Answered without running its command's whole path: a run that skipped (busy, done, missed). */
  answered: 1,
  /** Did its whole work: a run that started and saw out its child; any other command that succeeded. */
  whole: 2,
} as const;

let reached: number | undefined;

/** Said by a command whose exit code alone does not tell how far it went (`run`). */
export function noteReach(r: number): void {
  reached = Math.max(reached ?? Reach.none, r);
}

/** How far this start went, given the exit code it ends with. */
export function reach(exitCode: number): number {
  return reached ?? (exitCode === 0 ? Reach.whole : Reach.none);
}
