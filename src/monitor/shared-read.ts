// One read for many readers: callers that ask while a read is in flight share it, so a flood of
// scrapes makes one read of the store at a time instead of a queue of them (issue 44).
import { monoNow } from '../clock.js';

interface Read<T> {
  result: Promise<T>;
  served: number;
}

/**
 * How long a read may go on answering a flood after it ended: while every turn of the event loop
 * brings new callers (a flood taken up a few connections a turn), at most this long; a lone
 * scraper, whose next request comes turns later, always gets a new read.
 */
export const MAX_SHARED_MS = 1_000;

/** Resolves at the event loop's next check phase: after the I/O callbacks of its current turn. */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * `read` wrapped so that at most one runs at a time and every call made while it runs gets its
 * result (or its error), instead of waiting behind every request before it. After it ends, it
 * still answers the calls of each following turn of the event loop while every turn brings some
 * (a flood: the requests whose bytes came during the read, taken up once it ended, and those the
 * loop takes up a few a turn), up to MAX_SHARED_MS; the first turn without a new call ends it,
 * and the call after that starts the next read. A read starts at the end of the loop's turn, so
 * the requests that came together share it from the first. `onDone` is told how many calls each
 * read served.
 */
export function sharedRead<T>(read: () => Promise<T>, onDone?: (served: number) => void): () => Promise<T> {
  let current: Read<T> | undefined;
  const retire = async (r: Read<T>): Promise<void> => {
    const endedAt = monoNow();
    for (let seen = -1; seen !== r.served && monoNow() - endedAt < MAX_SHARED_MS;) {
      seen = r.served;
      await nextTurn();
    }
    if (current === r) current = undefined;
    onDone?.(r.served);
  };
  const start = (): Read<T> => {
    const r: Read<T> = { result: nextTurn().then(read), served: 0 };
    const done = (): void => void retire(r);
    r.result.then(done, done);
    return r;
  };
  return () => {
    current ??= start();
    current.served++;
    return current.result;
  };
}
