// How a leasejob process ends, for both entries (bin/leasejob.js under npm, the single
// executable's src/cli/single-file.ts): the CLI decides the exit code; this only exits with
// it, once what it wrote has been taken.
import { ExitCode } from '../errors.js';

let outputError: NodeJS.ErrnoException | undefined;

/**
 * Output that cannot be written. A reader that went away (`leasejob status | head -1`, EPIPE)
 * wanted no more: the command's own exit code stands. Anything else (a full disk, ENOSPC) means
 * what the caller asked for was lost: exit 74 (EX_IOERR) saying so, never 0. stderr's own
 * errors cannot be reported anywhere and are ignored.
 */
export function watchOutput(): void {
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') outputError ??= err;
  });
  process.stderr.on('error', () => {});
}

/** Bounded, so a reader that never reads cannot hold the process. */
const DRAIN_LIMIT_MS = 10_000;

const drained = (stream: NodeJS.WriteStream): Promise<void> =>
  stream.writableLength === 0 || stream.destroyed
    ? Promise.resolve()
    : new Promise((resolve) => {
        stream.once('drain', resolve);
        stream.once('close', resolve);
      });

/** Exits with `code` once stdout and stderr are drained (or with 74 if stdout could not be written). */
export async function exitWhenWritten(code: number): Promise<never> {
  // A slow reader on a pipe (`leasejob status | jq`) may not have taken all of stdout yet:
  // exiting now would cut it short.
  const limit = new Promise((resolve) => setTimeout(resolve, DRAIN_LIMIT_MS).unref());
  await Promise.race([Promise.all([drained(process.stdout), drained(process.stderr)]), limit]);
  // A failed write to a file reports its error a tick later.
  await new Promise((resolve) => setImmediate(resolve));
  if (outputError !== undefined) {
    process.stderr.write(`leasejob: could not write the output: ${outputError.code ?? outputError.message}\n`);
    process.exit(ExitCode.outputLost);
  }
  process.exit(code);
}
