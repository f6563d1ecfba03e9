// One read for many readers: callers that ask while a read is in flight share it, so a flood of
// scrapes makes one read of the store at a time instead of a queue of them (issue 44).

interface Read<T> {
  result: Promise<T>;
  served: number;
}

/** Resolves at the event loop's next check phase: after the I/O callbacks of its current turn. */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * `read` wrapped so that at most one runs at a time and every call made while it runs gets its
 * result (or its error), instead of waiting behind every request before it. "While it runs"
 * counts the event loop's turn in which it ends: the requests whose bytes came during the read
 * but that the loop could only take up once it ended (all of them, for the embedded store's
 * synchronous reads) are answered by it, never by a read more than that turn old. A read starts
 * at the end of the loop's turn, so the requests that came together share it from the first. A
 * call after that starts the next read. `onDone` is told how many calls each read served.
 */
export function sharedRead<T>(read: () => Promise<T>, onDone?: (served: number) => void): () => Promise<T> {
  let current: Read<T> | undefined;
  const start = (): Read<T> => {
    const r: Read<T> = { result: nextTurn().then(read), served: 0 };
    const retire = (): void => {
      // Still taking callers until the loop's turn after the read ended is over.
      void nextTurn().then(() => {
        if (current === r) current = undefined;
        onDone?.(r.served);
      });
    };
    r.result.then(retire, retire);
    return r;
  };
  return () => {
    current ??= start();
    current.served++;
    return current.result;
  };
}
