// Shared by the tests: they run against the real delayq named by
// $DELAYQ_URL and $DELAYQ_TOKEN (tests/clients/test_node_client.py starts one).
import { createServer } from 'node:http';
import { Client } from '../index.js';

let n = 0;
/** A topic or id no other test (or run) uses. */
export const unique = (prefix) => `${prefix}-${process.pid}-${Date.now()}-${++n}`;

export const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

export const client = (opts = {}) => new Client(opts);

/** A logger that keeps what the Worker said, by level. */
export function recordingLogger() {
  const lines = [];
  const at = (level) => (msg) => lines.push(`${level}: ${msg}`);
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/**
 * An HTTP server on loopback: handler(req, body Buffer, res). Resolves to
 * {url, close}.
 */
export async function serve(handler) {
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => handler(req, Buffer.concat(chunks), res));
  });
  await new Promise((resolve) => { server.listen(0, '127.0.0.1', resolve); });
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    close: () => new Promise((resolve) => { server.closeAllConnections?.(); server.close(resolve); }),
  };
}

/** Polls `pred` (async) until it is true; fails after `ms`. */
export async function waitFor(pred, what, ms = 15000) {
  const end = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}
