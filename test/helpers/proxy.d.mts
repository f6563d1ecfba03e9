export interface Proxy {
  port: number;
  readonly state: 'open' | 'reset' | 'blackhole' | 'hold';
  /** The connections accepted so far, in order: when each opened and closed (ms since the epoch). */
  connections(): Array<{ openedAt: number; closedAt: number | undefined }>;
  /** 'reset': open connections reset, new ones refused; 'blackhole': everything held until heal(). */
  cut(mode?: 'reset' | 'blackhole'): void;
  /** The next statement containing `text` and everything after it on its connection go nowhere; resolves when it was sent. */
  silence(text: string): Promise<void>;
  /** From the next statement containing `text`, for `ms`, answers to such statements arrive only when the `ms` are over (the database is slow; the statements ran). */
  slowAnswers(text: string, ms: number): void;
  /** Open connections reset; new ones go to `target`'s host and port (the address moved to another server). */
  retarget(target: string): void;
  /** Leave new connections unanswered until heal(); open ones go on. */
  hold(): void;
  /** Forward again, delivering whatever was held. */
  heal(): void;
  close(): Promise<void>;
  /** The same URL with host and port replaced by the proxy's. */
  url(target: string): string;
}
/** `target`: the database's URL, to take host and port from. */
export function startProxy(target: string): Promise<Proxy>;
