// The guard's entry for the npm package (dist/guard.cjs, bundled by scripts/bundle.mjs): leasejob
// starts it with its own Node for every child (lease/guarded-spawn.ts). Node built-ins only.
import { runGuard } from '../lease/guard.js';

runGuard();
