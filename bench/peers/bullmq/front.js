// An HTTP front for BullMQ, for delayq's benchmarks: BullMQ's Queue and
// (manually driven) Worker behind node:http, answering the part of delayq's
// HTTP JSON protocol that bench/loadgen sends, so that the same load
// generator drives delayq and BullMQ over the same hop (one HTTP request per
// add, per pop, per finish-and-pop).
//
//   node front.js --port HTTP_PORT --redis-port P
//
// POST /add     {"topic","id","delay"|"at","ttr","body"} or {"jobs":[...]}
//               -> Queue.add / Queue.addBulk (ttr is not used: BullMQ's lock
//               duration is its worker's)
// POST /pop     {"topic", "finish": id|[ids]} -> the finished jobs are
//               completed and the last one fetches the next job in the same
//               Redis call (moveToCompleted with fetchNext, as BullMQ's own
//               Worker does); without finish, one moveToActive. No
//               "timeout" (no long poll) and no "count": they answer 400.
// POST /finish  {"id"} or {"ids":[...]}
//
// Answers are delayq-shaped: {"success":true,"id":..,"topic":..,"value":..,
// "finished":[{"id":..,"success":..}]} for a pop ("id":null when none).
// It prints "listening" on stdout once the port is open.
'use strict';
const http = require('http');
const crypto = require('crypto');
const { Queue, Worker } = require('bullmq');

const args = { port: 0, 'redis-port': 6379 };
for (let i = 2; i + 1 < process.argv.length; i += 2) {
  args[process.argv[i].replace(/^--/, '')] = Number(process.argv[i + 1]);
}
if (!args.port) {
  console.error('usage: node front.js --port HTTP_PORT --redis-port P');
  process.exit(2);
}
const connection = { host: '127.0.0.1', port: args['redis-port'], maxRetriesPerRequest: null };

class BadRequest extends Error {}

// One Queue and one manual Worker (no processor: jobs are taken by pop) per topic.
const topics = new Map();
function topic(name) {
  if (typeof name !== 'string' || !name) throw new BadRequest("field 'topic' is required");
  let t = topics.get(name);
  if (!t) {
    t = { queue: new Queue(name, { connection }), worker: new Worker(name, null, { connection }) };
    topics.set(name, t);
  }
  return t;
}

// Jobs popped and not yet finished, by id: their Job (which holds its lock token).
const taken = new Map();

function jobOpts(j) {
  let delay = 0;
  if (j.at !== undefined) delay = Math.max(0, Math.round(j.at * 1000 - Date.now()));
  else if (j.delay !== undefined) delay = Math.round(j.delay * 1000);
  return { jobId: j.id, delay, attempts: 1, removeOnComplete: true, removeOnFail: true };
}

async function add(req) {
  if (Array.isArray(req.jobs)) {
    const byTopic = new Map();
    for (const j of req.jobs) {
      const q = topic(j.topic).queue;
      if (!byTopic.has(q)) byTopic.set(q, []);
      byTopic.get(q).push({ name: 'j', data: { b: j.body }, opts: jobOpts(j) });
    }
    for (const [q, jobs] of byTopic) await q.addBulk(jobs);
    return { success: true, jobs: req.jobs.map((j) => ({ success: true, id: j.id })) };
  }
  const job = await topic(req.topic).queue.add('j', { b: req.body }, jobOpts(req));
  return { success: true, id: job.id };
}

// Completes the job id; with fetchNext, answers BullMQ's next job data (or null).
async function complete(id, fetchNext) {
  const job = taken.get(id);
  if (!job) return { finished: { id, success: false, code: 'not_found', error: 'no job with this id' } };
  taken.delete(id);
  const next = await job.moveToCompleted(null, job.token, fetchNext);
  return { finished: { id, success: true }, next: Array.isArray(next) ? next : null, job };
}

function popAnswer(t, job, finished) {
  const a = job
    ? { success: true, id: job.id, topic: t, value: job.data.b }
    : { success: true, id: null, value: null };
  if (finished.length) a.finished = finished; // last: loadgen reads ids before it
  return a;
}

async function pop(req) {
  if (req.timeout !== undefined || req.count !== undefined) {
    throw new BadRequest('this front has no long poll and no count');
  }
  const t = topic(req.topic);
  const ids = req.finish === undefined ? [] : [].concat(req.finish);
  const finished = [];
  let job = null;
  for (let k = 0; k < ids.length; k++) {
    const last = k === ids.length - 1;
    const r = await complete(ids[k], last);
    finished.push(r.finished);
    if (last && r.next) {
      const [jobData, jobId] = r.next;
      job = jobData ? await t.worker.nextJobFromJobData(jobData, jobId, r.job.token) : null;
      if (job) taken.set(job.id, job);
      return popAnswer(req.topic, job, finished);
    }
  }
  job = await t.worker.getNextJob(crypto.randomUUID(), { block: false });
  if (job) taken.set(job.id, job);
  return popAnswer(req.topic, job, finished);
}

async function finish(req) {
  if (Array.isArray(req.ids)) {
    const jobs = [];
    for (const id of req.ids) jobs.push((await complete(id, false)).finished);
    return { success: true, jobs };
  }
  const r = await complete(req.id, false);
  return r.finished.success ? { success: true } : { ...r.finished };
}

const routes = { '/add': add, '/pop': pop, '/finish': finish };

function reply(res, status, obj) {
  const body = Buffer.from(JSON.stringify(obj));
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': body.length });
  res.end(body);
}

const server = http.createServer((req, res) => {
  const route = routes[req.url];
  if (req.method !== 'POST' || !route) {
    reply(res, 404, { success: false, error: 'no such command', code: 'not_found' });
    return;
  }
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    try {
      reply(res, 200, await route(JSON.parse(Buffer.concat(chunks).toString('utf8'))));
    } catch (e) {
      const bad = e instanceof BadRequest || e instanceof SyntaxError;
      reply(res, bad ? 400 : 500,
        { success: false, error: String(e.message || e), code: bad ? 'bad_request' : 'internal' });
    }
  });
});
// Long benchmark connections, as bench's nginx keeps them.
server.keepAliveTimeout = 75000;
server.maxRequestsPerSocket = 0;
server.listen(args.port, '127.0.0.1', () => console.log('listening'));

async function shutdown() {
  server.close();
  for (const t of topics.values()) {
    await t.worker.close(true);
    await t.queue.close();
  }
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
