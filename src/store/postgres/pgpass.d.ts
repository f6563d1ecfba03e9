// The pgpass package (the ~/.pgpass reader node-postgres uses) ships no types.
declare module 'pgpass' {
  namespace pgpass {
    interface ConnectionInfo {
      host?: string;
      port?: number | string;
      database?: string;
      user?: string;
    }
    /** Where its warnings go (process.stderr by default); returns the previous stream. */
    function warnTo(stream: NodeJS.WritableStream): NodeJS.WritableStream;
  }
  /** Calls back with the password of the first matching line, or undefined (no file, no match, a file others may read). */
  function pgpass(connInfo: pgpass.ConnectionInfo, cb: (password: string | undefined) => void): void;
  export = pgpass;
}
