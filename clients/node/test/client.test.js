// The Client against a real delayq: every command, batch results, the
// error class of every protocol code, body round trips, transport failures.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { createServer } from 'node:net';
import {
  BadRequest, Client, ClientError, Conflict, ConnectFailed, ConnectionLost, DelayqError, NotFound,
  ServerError, Timeout, TooLarge, Unauthorized, Unavailable, resultError,
} from '../index.js';
import { client, serve, unique } from './helpers.js';

test('add, pop, finish: the body comes back as given', async () => {
  const c = client();
  const topic = unique('orders');
  const bodies = [{ order: 42, items: ['a', 'ü'] }, '{"looks":"like json"}', 'plain', 7, [1, null]];
  const ids = [];
  for (const body of bodies) ids.push(await c.add(topic, body, { ttr: 30 }));
  assert.equal(await c.add(topic, 'mine', { id: `${topic}-x` }), `${topic}-x`);
  for (const [i, body] of bodies.entries()) {
    const job = await c.pop(topic);
    assert.deepEqual([job.id, job.topic, job.body, job.attempts, job.ttr], [ids[i], topic, body, 1, 30]);
    await c.finish(job.id);
    await assert.rejects(c.get(job.id), NotFound);
  }
  assert.equal((await c.pop(topic)).id, `${topic}-x`);
  assert.equal(await c.pop(topic), null);
});

test('a delayed job is not popped before it is due; reschedule makes it ready', async () => {
  const c = client();
  const topic = unique('later');
  const id = await c.add(topic, 'x', { delay: 3600 });
  assert.equal(await c.pop(topic), null);
  const info = await c.get(id);
  assert.equal(info.state, 'delay');
  assert.ok(Math.abs(info.due - (Date.now() + 3600e3)) < 60e3, `due ${info.due}`);
  assert.deepEqual(await c.reschedule(id, { at: new Date(Date.now() - 1000) }), { state: 'ready', due: null });
  assert.equal((await c.pop(topic)).id, id);
});

test('a long-poll is woken by an add', async () => {
  const c = client();
  const topic = unique('wake');
  const started = Date.now();
  const popped = c.pop(topic, { timeout: 10 });
  setTimeout(() => { client().add(topic, 'now'); }, 300);
  assert.equal((await popped).body, 'now');
  assert.ok(Date.now() - started < 5000);
});

test('finish-and-pop, popMany and the batches answer one Result per id', async () => {
  const c = client();
  const topic = unique('batch');
  const added = await c.addMany([1, 2, 3].map((i) => ({ topic, body: i, id: `${topic}-${i}` })));
  assert.deepEqual(added.map((r) => [r.id, r.success]), [1, 2, 3].map((i) => [`${topic}-${i}`, true]));
  const again = await c.addMany([{ topic, body: 0, id: `${topic}-1` }]);
  assert.equal(again[0].code, 'conflict');
  assert.ok(resultError(again[0]) instanceof Conflict);
  const first = await c.pop(topic);
  const { job, finished } = await c.pop(topic, { finish: first.id });
  assert.equal(job.id, `${topic}-2`);
  assert.deepEqual(finished.map((r) => [r.id, r.success]), [[first.id, true]]);
  const { jobs, finished: none } = await c.popMany(topic, 5, { finish: [] });
  assert.deepEqual([jobs.map((j) => j.id), none], [[`${topic}-3`], []]);
  const results = await c.finishMany([job.id, 'no-such-job']);
  assert.deepEqual(results.map((r) => [r.success, r.code]), [[true, null], [false, 'not_found']]);
  assert.ok(resultError(results[1]) instanceof NotFound);
  assert.deepEqual((await c.deleteMany([jobs[0].id])).map((r) => r.success), [true]);
  assert.deepEqual(await c.finishMany([]), []);
});

test('touch, release, bury, kick, get, jobs, iterJobs, upsert', async () => {
  const c = client();
  const topic = unique('life');
  const id = await c.add(topic, { v: 1 }, { ttr: 20, retries: 5 });
  await c.pop(topic);
  const due = await c.touch(id);
  assert.ok(due > Date.now() + 15000);
  assert.equal(await c.release(id, 600), 'delay');
  assert.equal((await c.get(id)).state, 'delay');
  await c.reschedule(id, { delay: 0 });
  await c.pop(topic);
  await c.bury(id);
  await assert.rejects(c.touch(id), Conflict);
  assert.equal((await c.get(id)).state, 'buried');
  assert.equal(await c.kick(topic, 10), 1);
  const info = await c.get(id);
  assert.deepEqual([info.state, info.body, info.attempts, info.retries, info.kept], ['ready', { v: 1 }, 2, 5, false]);
  for (let i = 0; i < 4; i++) await c.add(topic, i);
  const page = await c.jobs(topic, 'ready', { limit: 2 });
  assert.equal(page.jobs.length, 2);
  assert.ok(page.cursor);
  const all = [];
  for await (const j of c.iterJobs(topic, 'ready', { page: 2 })) all.push(j.id);
  assert.equal(all.length, 5);
  assert.equal(new Set(all).size, 5);
  assert.equal(await c.upsert(topic, `${topic}-u`, 'first'), false);
  assert.equal(await c.upsert(topic, `${topic}-u`, 'second', { delay: 60 }), true);
  assert.equal((await c.get(`${topic}-u`)).body, 'second');
  assert.equal(await c.purge(topic), 6);
});

test('pause, resume, policy, stats, health, metrics', async () => {
  const c = client();
  const topic = unique('flow');
  await c.add(topic, 'p');
  await c.pause(topic);
  assert.equal(await c.pop(topic), null);
  await c.resume(topic);
  const job = await c.pop(topic);
  assert.equal(job.body, 'p');
  const policy = await c.policy(topic, { concurrency: 3 });
  assert.equal(policy.concurrency, 3);
  assert.equal((await c.policies(topic))[topic].concurrency, 3);
  assert.equal((await c.policy(topic, { concurrency: null })).concurrency, null);
  const stats = await c.stats(topic);
  assert.equal(stats.topics[topic].reserved, 1);
  assert.equal(await c.health(), true);
  assert.match(await c.metrics(), /^# (HELP|TYPE) /m);
});

test('every error code is its own class with code, status and the server message', async () => {
  const c = client();
  const topic = unique('errors');
  await assert.rejects(c.add(topic, 'x', { ttr: -1 }), (e) => e instanceof BadRequest
    && e instanceof ClientError && e.code === 'bad_request' && e.status === 400
    && /ttr/.test(e.message) && e.response?.success === false);
  await assert.rejects(new Client({ token: 'wrong-token' }).add(topic, 'x'),
    (e) => e instanceof Unauthorized && e.code === 'unauthorized' && e.status === 401);
  await assert.rejects(c.finish(unique('missing')),
    (e) => e instanceof NotFound && e.code === 'not_found' && e.status === 404);
  await c.add(topic, 'x', { id: `${topic}-1` });
  await assert.rejects(c.add(topic, 'y', { id: `${topic}-1` }),
    (e) => e instanceof Conflict && e.code === 'conflict' && e.status === 409);
  await assert.rejects(c.add(topic, 'x'.repeat(70 * 1024)),
    (e) => e instanceof TooLarge && e.code === 'too_large' && e.status === 413);
  await assert.rejects(c.reschedule('x', {}), TypeError);
  await assert.rejects(c.add(topic, 'x', { dealy: 5 }), { name: 'TypeError', message: /unknown add option\(s\) dealy/ });
  assert.throws(() => new Client({ url: 'ftp://host' }), TypeError);
});

test('no connection: ConnectFailed (an Unavailable), and health() is false', async () => {
  const probe = createServer();
  await new Promise((resolve) => { probe.listen(0, '127.0.0.1', resolve); });
  const { port } = probe.address();
  await new Promise((resolve) => { probe.close(resolve); });
  const c = new Client({ url: `127.0.0.1:${port}` });
  await assert.rejects(c.add('t', 'x'), (e) => e instanceof ConnectFailed && e instanceof Unavailable
    && e.code === 'unavailable' && e.status === null);
  assert.equal(await c.health(), false);
});

test('no answer in time: ConnectionLost (a Timeout, outcome unknown)', async () => {
  const silent = createServer(() => {});
  await new Promise((resolve) => { silent.listen(0, '127.0.0.1', resolve); });
  try {
    const c = new Client({ url: `http://127.0.0.1:${silent.address().port}`, timeout: 0.3 });
    const started = Date.now();
    await assert.rejects(c.finish('x'), (e) => e instanceof ConnectionLost && e instanceof Timeout
      && e.code === 'timeout' && e.status === null);
    assert.ok(Date.now() - started < 3000);
  } finally {
    silent.close();
  }
});

test('an answer that is not delayq JSON: a ServerError named by its status', async () => {
  const proxy = await serve((req, body, res) => {
    res.writeHead(req.url.endsWith('/get') ? 502 : 200, { 'Content-Type': 'text/html' });
    res.end('<html>bad gateway</html>');
  });
  try {
    const c = new Client({ url: `${proxy.url}/prefix/` });
    await assert.rejects(c.get('x'), (e) => e instanceof ServerError && e.code === 'http_502'
      && e.status === 502 && e.message.includes('bad gateway'));
    await assert.rejects(c.finish('x'), (e) => e instanceof ServerError && e.code === 'internal'
      && e.status === 200);
    assert.ok(new ServerError('m') instanceof DelayqError);
  } finally {
    await proxy.close();
  }
});

test('a signal shared by many requests (the Worker stop signal) keeps no listener', async () => {
  const c = client();
  const shared = new AbortController();
  for (let i = 0; i < 20; i++) await c.pop(unique('idle'), { signal: shared.signal });
  await c.touch('no-such-job', { signal: shared.signal }).catch(() => {});
  assert.equal(getEventListeners(shared.signal, 'abort').length, 0);
});
