// The embedded store's driver errors as the operator should read them (exit 69).
import { DatabaseError } from '../../errors.js';

export function classifySqliteError(err: unknown, file: string): Error | undefined {
  const code = String((err as { code?: unknown }).code ?? '');
  if (!code.startsWith('SQLITE_')) return undefined;
  // Every command writes (WAL: its shared-memory file next to the state file), reads included.
  const hint =
    code.startsWith('SQLITE_READONLY') || code.startsWith('SQLITE_CANTOPEN')
      ? '; every command, status and history included, needs to write the state file and its directory: ' +
        'run it as the user that runs the jobs'
      : '';
  return new DatabaseError(`state file ${file}: ${(err as Error).message} (${code})${hint}`, 'E_STATE_FILE', {
    cause: err,
  });
}

/**
 * The embedded store's native module (better-sqlite3) could not be loaded: built for another
 * Node.js (the checkout was installed with one Node and is run with another) or not installed.
 * Said in one line with what to do (exit 69, nothing written); undefined for any other error.
 */
export function classifySqliteDriverError(err: unknown): Error | undefined {
  const code = String((err as { code?: unknown }).code ?? '');
  const message = String((err as Error).message ?? '');
  if (!/better[-_]sqlite3/.test(message)) return undefined;
  const fix =
    'run `npm rebuild better-sqlite3` (or `npm ci`) where leasejob is installed, with the Node.js that runs it; ' +
    'or use the single file (`npm run single-file`, no native module); or set LEASEJOB_DATABASE_URL';
  const abi = /NODE_MODULE_VERSION (\d+)\. This version of Node\.js requires\s+NODE_MODULE_VERSION (\d+)/.exec(message);
  if (code === 'ERR_DLOPEN_FAILED' && abi) {
    return new DatabaseError(
      `the embedded store's SQLite module (better-sqlite3) was built for another Node.js (module version ` +
        `${abi[1]}; Node.js ${process.version} needs ${abi[2]}): ${fix}`,
      'E_SQLITE_DRIVER',
      { cause: err },
    );
  }
  if (code === 'ERR_DLOPEN_FAILED' || code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND') {
    const first = message.split('\n')[0];
    return new DatabaseError(
      `the embedded store's SQLite module (better-sqlite3) could not be loaded (${code}: ${first}): ${fix}`,
      'E_SQLITE_DRIVER',
      { cause: err },
    );
  }
  return undefined;
}
