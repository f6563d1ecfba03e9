// Public library API: everything a Node program needs to run its own tasks under a lease.
export { runWithLease, newOwnerId } from './lease/runner.js';
export type {
  RunOptions,
  RunResult,
  TaskContext,
  AbortReason,
  WindowClaim,
  OnBusy,
  SequenceOptions,
  SequencePlan,
  SequenceWindow,
  WindowEvent,
} from './lease/types.js';
export { PgStore, PgStore as Store } from './store/postgres/store.js';
export type { LeaseStore } from './store/contract.js';
export { chooseStore, openStore } from './store/choice.js';
export { migrate } from './store/postgres/migrate.js';
export { passwordFileWarnings, resolveConnection } from './store/postgres/connection.js';
export { createPool } from './store/postgres/store.js';
export { parseSchedule, previousTick, nextTick } from './schedule/cron.js';
export { deriveOccurrence, windowKey, parseKubernetesJobName } from './schedule/occurrence.js';
export { parseDuration } from './schedule/duration.js';
export { LeasejobError, UsageError, DatabaseError, LeaseUnavailableError, InternalError, ExitCode } from './errors.js';
export { createLogger, silentLogger } from './log.js';
