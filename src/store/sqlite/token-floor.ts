// The token floor of the embedded store (as PostgreSQL's clock_token_floor()): a hybrid logical
// clock, so lease tokens never go back after the state file is restored from a backup, in place or not.
import { statSync } from 'node:fs';
import type { Sqlite } from './context.js';

/** The floor's clock: milliseconds since 2025-01-01 UTC, as PostgreSQL's (below 10^12 until 2056). */
const CLOCK_FROM_MS = Date.UTC(2025, 0, 1);

/** The state file's device and inode, recorded with the floor (for a reader of the row: which file issued it). */
function fileId(file: string): string {
  try {
    const st = statSync(file);
    return `${st.dev}:${st.ino}`;
  } catch {
    return 'unknown';
  }
}

/**
 * The floor the next token may not go below, inside the acquisition's immediate transaction: the
 * store clock in milliseconds since 2025-01-01 at **every** acquisition (the token is then
 * max(last + 1, floor), a hybrid logical clock), and never below the floor the file recorded
 * last (a clock stepped back on a live file does not lower it). A backup put back, even copied
 * over the live file's own bytes (same inode, same boot: nothing in the file tells it from the
 * original), issues its next token at the clock, above every token issued before the restore,
 * as long as this host's clock is not behind the one that issued them. docs/fencing.md says
 * what remains.
 */
export function tokenFloor(s: Sqlite, now: number): number {
  const row = s.db.prepare('SELECT floor FROM token_floor WHERE id = 1').get() as { floor: number } | undefined;
  const floor = Math.max(row?.floor ?? 0, now - CLOCK_FROM_MS);
  s.db
    .prepare(
      `INSERT INTO token_floor (id, boot_id, file_id, floor, raised_at) VALUES (1, @boot, @file, @floor, @now)
       ON CONFLICT (id) DO UPDATE SET boot_id = @boot, file_id = @file, floor = @floor, raised_at = @now`,
    )
    .run({ boot: s.boot, file: fileId(s.file), floor, now });
  return floor;
}
