// The single executable's main script (scripts/single-file.mjs): started by leasejob as the guard
// of a child (LEASEJOB_GUARD=1, lease/guarded-spawn.ts), it runs the guard and never loads the
// CLI bundle; otherwise it loads the CLI (startup/single-file-loader.ts).
import { GUARD_ENV } from '../lease/guard-protocol.js';
import { runGuard } from '../lease/guard.js';

if (process.env[GUARD_ENV] === '1') runGuard();
else void import('../startup/single-file-loader.js');
