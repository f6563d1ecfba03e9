// Error classes: every error carries a stable `code` and the exit code the CLI maps it to.

/** Exit codes of `leasejob run` and the other commands (see docs/run.md, "Exit codes"). */
export const ExitCode = {
  ok: 0,
  usage: 64,
  /** An operator write refused: the job's version was not the one read (compare-and-set). */
  conflict: 65,
  unavailable: 69,
  internal: 70,
  /** Output the caller asked for could not be written (stdout on a full disk): EX_IOERR. */
  outputLost: 74,
  leaseLost: 75,
  timeout: 124,
} as const;

export class LeasejobError extends Error {
  readonly code: string;
  readonly exitCode: number;

  constructor(message: string, code: string, exitCode: number, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.exitCode = exitCode;
  }
}

/** Bad flag, cron, zone, duration or name: nothing was written. Exit 64. */
export class UsageError extends LeasejobError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, 'E_USAGE', ExitCode.usage, options);
  }
}

/** Database unreachable, refused our credentials, or schema not migrated. Exit 69. */
export class DatabaseError extends LeasejobError {
  constructor(message: string, code = 'E_DATABASE', options?: { cause?: unknown }) {
    super(message, code, ExitCode.unavailable, options);
  }
}

/** The lease was lost while running, or could not be had (`--on-busy fail`, wait timed out). Exit 75. */
export class LeaseUnavailableError extends LeasejobError {
  constructor(message: string, code = 'E_LEASE_LOST', options?: { cause?: unknown }) {
    super(message, code, ExitCode.leaseLost, options);
  }
}

/** Anything we did not expect. Exit 70. */
export class InternalError extends LeasejobError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, 'E_INTERNAL', ExitCode.internal, options);
  }
}

/** An operator write found the job changed since it was read (its version differs): nothing written. Exit 65. */
export class ConflictError extends LeasejobError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, 'E_CONFLICT', ExitCode.conflict, options);
  }
}
