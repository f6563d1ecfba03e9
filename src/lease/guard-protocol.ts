// What leasejob and its guard (guard.ts) say to each other over the guard's control socket, and how the guard is started.
/** The environment variable that starts the single file as the guard instead of the CLI. */
export const GUARD_ENV = 'LEASEJOB_GUARD';
/** The guard's end of the control socket. */
export const CONTROL_FD = 3;

export interface GuardStart {
  file: string;
  args: string[];
  env: Record<string, string>;
  cwd: string;
  /** The child's user and group, when leasejob (root) starts it as another user without setpriv. */
  uid?: number;
  gid?: number;
  /** When to SIGTERM the group (monotonic ms), null for no deadline; SIGKILL graceMs later. */
  stopAtMs: number | null;
  graceMs: number;
}

export type ToGuard = { start: GuardStart } | { stopAtMs: number | null } | { done: true };
export type FromGuard =
  | { pid: number }
  | { spawnError: string; errno: string | undefined }
  | { exit: number | null; signal: NodeJS.Signals | null }
  | { deadline: true };
