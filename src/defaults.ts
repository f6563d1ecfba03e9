// Defaults of the documented flags, in one place for the CLI's --help and for library callers
// that leave them out. No imports: the CLI wiring reads it before any command module loads.

export const DEFAULTS = {
  // Several times the worst expected renewal delay (DB latency, GC, CPU throttling), short
  // enough that a dead owner is replaced quickly: the seed's 60-120 s guidance.
  ttl: '90s',
  // Enough for a typical process to flush and exit on SIGTERM; must fit inside the TTL.
  killGrace: '10s',
  tz: 'UTC',
  onBusy: 'skip',
  schema: 'leasejob',
} as const;
