// Public library API: everything a Node program needs to run its own tasks under a lease.
export { runWithLease, newOwnerId } from './runner.js';
export type { RunOptions, RunResult, TaskContext, AbortReason, WindowClaim, OnBusy } from './runner.js';
export { PgStore, PgStore as Store } from './pg-store.js';
export type { LeaseStore } from './store.js';
export { chooseStore, openStore } from './open-store.js';
export { migrate } from './migrate.js';
export { passwordFileWarnings, resolveConnection } from './db.js';
export { createPool } from './pg-store.js';
export { parseSchedule, previousTick, nextTick } from './schedule.js';
export { deriveOccurrence, windowKey, parseKubernetesJobName } from './occurrence.js';
export { parseDuration } from './duration.js';
export { LeasejobError, UsageError, DatabaseError, LeaseUnavailableError, InternalError, ExitCode } from './errors.js';
export { createLogger, silentLogger } from './log.js';
