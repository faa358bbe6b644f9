// The Worker against a real delayq: finish on the next poll, concurrency,
// touch heartbeats, release with backoff, bury after maxAttempts, stop (from
// code and by SIGTERM/SIGINT), a 4xx while polling.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { BadRequest, NotFound, Worker } from '../index.js';
import { client, recordingLogger, sleep, unique, waitFor } from './helpers.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/signal-worker.js', import.meta.url));

function worker(topic, handler, opts = {}) {
  const log = recordingLogger();
  const w = new Worker(client(), topic, handler, { pollTimeout: 5, handleSignals: false, logger: log, ...opts });
  return { w, log };
}

async function gone(c, id) {
  try {
    await c.get(id);
    return false;
  } catch (e) {
    if (e instanceof NotFound) return true;
    throw e;
  }
}

test('handled jobs are finished; concurrency runs handlers side by side', async () => {
  const c = client();
  const topic = unique('work');
  const ids = [];
  for (let i = 0; i < 6; i++) ids.push(await c.add(topic, { i }));
  let running = 0;
  let most = 0;
  const seen = [];
  const { w } = worker(topic, async (job) => {
    running++;
    most = Math.max(most, running);
    await sleep(200);
    seen.push(job.body.i);
    running--;
  }, { concurrency: 3 });
  const done = w.run();
  await waitFor(async () => seen.length === 6, 'six jobs handled');
  w.stop();
  await done;
  assert.equal(most, 3);
  assert.deepEqual([...seen].sort(), [0, 1, 2, 3, 4, 5]);
  for (const id of ids) assert.ok(await gone(c, id), `${id} finished`);
});

test('a handler that throws: released with the backoff step, buried at maxAttempts', async () => {
  const c = client();
  const topic = unique('fail');
  const id = await c.add(topic, 'x');
  const { w, log } = worker(topic, () => { throw new Error('smtp down'); },
    { backoff: [120, 600], maxAttempts: 2 });
  assert.deepEqual([w.backoffFor(1), w.backoffFor(2), w.backoffFor(9)], [120, 600, 600]);
  const done = w.run();
  await waitFor(async () => (await c.get(id)).state === 'delay', 'the release');
  let info = await c.get(id);
  assert.equal(info.attempts, 1);
  assert.ok(Math.abs(info.due - (Date.now() + 120e3)) < 10e3, `due in ${info.due - Date.now()} ms`);
  assert.ok(log.lines.some((l) => l.includes('failed on attempt 1 (Error: smtp down); retry in 120 s')),
    log.lines.join('\n'));
  await c.reschedule(id, { delay: 0 });
  await waitFor(async () => (await c.get(id)).state === 'buried', 'the bury');
  info = await c.get(id);
  assert.equal(info.attempts, 2);
  w.stop();
  await done;
});

test("backoff: [] leaves the delay to the job's own backoff", async () => {
  const c = client();
  const topic = unique('ownbackoff');
  const id = await c.add(topic, 'x', { backoff: [300] });
  const { w } = worker(topic, () => { throw new Error('later'); }, { backoff: [] });
  const done = w.run();
  await waitFor(async () => (await c.get(id)).state === 'delay', 'the release');
  const { due } = await c.get(id);
  assert.ok(Math.abs(due - (Date.now() + 300e3)) < 10e3, `due in ${due - Date.now()} ms`);
  w.stop();
  await done;
});

test('heartbeat: a handler running past the TTR keeps the job', async () => {
  const c = client();
  const topic = unique('beat');
  const id = await c.add(topic, 'long', { ttr: 1 });
  let calls = 0;
  const { w } = worker(topic, async () => { calls++; await sleep(2600); });
  const done = w.run();
  await waitFor(async () => calls === 1, 'the handler started');
  await sleep(1800);
  // past the TTR of 1 s: still reserved, never delivered again
  assert.equal((await c.get(id)).state, 'reserved');
  await waitFor(async () => gone(c, id), 'the finish');
  w.stop();
  await done;
  assert.equal(calls, 1);
});

test('without heartbeat the same job is delivered again after its TTR', async () => {
  const c = client();
  const topic = unique('nobeat');
  const id = await c.add(topic, 'long', { ttr: 1 });
  const { w } = worker(topic, async () => { await sleep(2200); }, { heartbeat: false });
  const done = w.run();
  await sleep(300);
  const other = await c.pop(topic, { timeout: 5 });
  assert.deepEqual([other?.id, other?.attempts], [id, 2]);
  await c.finish(id);
  w.stop();
  await done;
});

test('stop(): a long-poll is cut short; the job in hand is finished first', async () => {
  const c = client();
  const idle = worker(unique('idle'), () => {}, { pollTimeout: 20 });
  const idleRun = idle.w.run();
  await sleep(300);
  let started = Date.now();
  idle.w.stop();
  await idleRun;
  assert.ok(Date.now() - started < 1000, `stopped in ${Date.now() - started} ms`);

  const topic = unique('inhand');
  const id = await c.add(topic, 'x');
  let w;
  const busy = worker(topic, async () => { w.stop(); await sleep(300); });
  w = busy.w;
  started = Date.now();
  await w.run();
  assert.ok(await gone(c, id), 'the job in hand was finished');
});

test('a 4xx while polling rejects run()', async () => {
  const { w } = worker('not a topic!', () => {});
  await assert.rejects(w.run(), BadRequest);
  assert.throws(() => new Worker(client(), 't', () => {}, { concurrency: 0 }), RangeError);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  test(`${signal}: the job in hand is finished, then the process exits 0`, async () => {
    const c = client();
    const topic = unique(signal.toLowerCase());
    const id = await c.add(topic, 'x');
    const child = spawn(process.execPath, [FIXTURE, topic, '600'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    const exited = new Promise((resolve) => { child.on('exit', (code) => resolve(code)); });
    await waitFor(async () => out.includes(`handling ${id}`), 'the handler started');
    child.kill(signal);
    assert.equal(await exited, 0);
    assert.deepEqual(out.trim().split('\n'), [`handling ${id}`, `done ${id}`, 'stopped']);
    assert.ok(await gone(c, id), 'finished before the exit');
  });
}
