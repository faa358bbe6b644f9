// With the deployment's Redis stopped (DELAYQ_REDIS_DOWN=1, set by
// tests/clients/test_node_client.py after the suite): every command is an
// Unavailable, health() is false, and a Worker keeps polling, pausing
// between tries, until it is stopped.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Unavailable, Worker } from '../index.js';
import { client, recordingLogger, sleep, unique } from './helpers.js';

const down = process.env.DELAYQ_REDIS_DOWN === '1';

test('Redis down: Unavailable, code unavailable, 503', { skip: !down && 'Redis is up' }, async () => {
  const c = client();
  for (const call of [() => c.add('t', 'x'), () => c.pop('t'), () => c.finish('x'), () => c.stats()]) {
    await assert.rejects(call(), (e) => e instanceof Unavailable && e.code === 'unavailable'
      && e.status === 503);
  }
  assert.equal(await c.health(), false);
});

test('Redis down: the Worker logs, pauses, tries again, and stops', { skip: !down && 'Redis is up' }, async () => {
  const log = recordingLogger();
  const w = new Worker(client(), unique('down'), () => {}, { errorPause: 0.1, logger: log, handleSignals: false });
  const running = w.run();
  await sleep(1000);
  const started = Date.now();
  w.stop();
  await running;
  assert.ok(Date.now() - started < 1000, 'stop() cut the pause short');
  const fails = log.lines.filter((l) => l.startsWith('warn: delayq worker 0: pop failed'));
  // pauses 0.1, 0.2, 0.4 s: three or four tries within the second
  assert.ok(fails.length >= 3 && fails.length <= 5, log.lines.join('\n'));
});
