// The README's first command: a throwaway PostgreSQL, `leasejob migrate`, then the same
// scheduled run twice in one minute. The child prints once; the second run finds the window done.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startEmbeddedPostgres } from './helpers/embedded-pg.mjs';

const bin = fileURLToPath(new URL('../bin/leasejob.js', import.meta.url));
const command = process.argv.slice(2).length ? process.argv.slice(2) : ['echo', 'hello from the scheduled job'];
const pg = await startEmbeddedPostgres();
const env = { ...process.env, DATABASE_URL: pg.url, LEASEJOB_LOG_LEVEL: process.env.LEASEJOB_LOG_LEVEL ?? 'warn' };
const leasejob = (args) => {
  console.log(`$ leasejob ${args.map((a) => (/[\s*']/.test(a) ? `'${a}'` : a)).join(' ')}`);
  execFileSync(process.execPath, [bin, ...args], { env, stdio: 'inherit' });
};
try {
  leasejob(['migrate']);
  const run = ['run', '--name', 'hello', '--schedule', '* * * * *', '--window-from-schedule', '--', ...command];
  leasejob(run);
  leasejob(run);
  console.log("(the second run found this minute's window completed and did not start the command)");
} finally {
  await pg.stop();
}
