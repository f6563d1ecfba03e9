// The token floor of the embedded store (as PostgreSQL's clock_token_floor() and fence_epoch()):
// lease tokens never go back after the state file is restored from a backup.
import { statSync } from 'node:fs';
import type { Sqlite } from './context.js';

/** The floor's clock: milliseconds since 2025-01-01 UTC, as PostgreSQL's (below 10^12 until 2056). */
const CLOCK_FROM_MS = Date.UTC(2025, 0, 1);

/**
 * The state file's identity: its device and inode. A backup or copied volume put in its place is
 * another file (a rename, an extraction, another host); a copy written over the live file's own
 * bytes keeps the inode and is not seen (docs/fencing.md says so).
 */
function fileId(file: string): string {
  try {
    const st = statSync(file);
    return `${st.dev}:${st.ino}`;
  } catch {
    return 'unknown';
  }
}

/**
 * The floor the next token may not go below, inside the acquisition's immediate transaction. The
 * row names the boot and the file tokens were last issued under; under another (a restored host,
 * a reboot, a restored file) the floor is first raised to the store clock: every token issued
 * before was at most the floor of its own time plus its acquisitions since, so below this clock,
 * as long as this host's clock is not behind the one that issued them. A file without the row (a
 * new one, or one from before version 11) records it without raising.
 */
export function tokenFloor(s: Sqlite, now: number): number {
  const here = { boot: s.boot, file: fileId(s.file) };
  const row = s.db.prepare('SELECT boot_id, file_id, floor FROM token_floor WHERE id = 1').get() as
    { boot_id: string; file_id: string; floor: number } | undefined;
  if (!row) {
    s.db.prepare('INSERT INTO token_floor (id, boot_id, file_id, floor) VALUES (1, ?, ?, 0)').run(here.boot, here.file);
    return 0;
  }
  if (row.boot_id === here.boot && row.file_id === here.file) return row.floor;
  const floor = Math.max(row.floor, now - CLOCK_FROM_MS);
  s.db
    .prepare('UPDATE token_floor SET boot_id = ?, file_id = ?, floor = ?, raised_at = ? WHERE id = 1')
    .run(here.boot, here.file, floor, now);
  return floor;
}
