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
