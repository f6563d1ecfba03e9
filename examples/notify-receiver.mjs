#!/usr/bin/env node
// A minimal receiver for `leasejob run --notify-url`: prints one line per notification (a failed
// window, a lost lease, a missed occurrence) and the recorded output, answers 204. A starting
// point for forwarding to chat or a pager; see docs/notifications.md for the payload.
//
//   node examples/notify-receiver.mjs 8787 [token]
//   leasejob run --name nightly --window-from-schedule --schedule '5 0 * * *' \
//     --notify-url 'http://127.0.0.1:8787/leasejob?token=TOKEN' --record-output -- ./nightly.sh
//
// With a token, a request without `?token=<it>` is refused (403): the URL is the shared secret.
import http from 'node:http';

const port = Number(process.argv[2] ?? 8787);
const token = process.argv[3];
const LIMIT = 256 * 1024; // leasejob's payloads are far smaller (the tail is at most 64 KiB)

http
  .createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://receiver');
    if (req.method !== 'POST') return void res.writeHead(405).end();
    if (token !== undefined && url.searchParams.get('token') !== token) return void res.writeHead(403).end();
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > LIMIT) req.destroy();
      else chunks.push(c);
    });
    req.on('end', () => {
      let n;
      try {
        n = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        return void res.writeHead(400).end();
      }
      const what =
        n.event === 'missed'
          ? `missed occurrence ${n.scheduled_at}`
          : `${n.event}, exit ${n.exit_code}${n.signal ? ` (${n.signal})` : ''}`;
      console.log(
        `${n.finished_at} ${n.job} window ${n.window ?? '-'} attempt ${n.attempt ?? '-'} on ${n.host}: ${what}`,
      );
      if (n.output)
        console.log(
          `  last ${Buffer.byteLength(n.output.tail)} of ${n.output.bytes} bytes of output:\n${n.output.tail.replace(/^/gm, '  | ')}`,
        );
      res.writeHead(204).end();
    });
  })
  .listen(port, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${port}/`));
