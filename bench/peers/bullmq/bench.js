// BullMQ peer for delayq's benchmarks, run by bench/run.py against a
// private redis-server on 127.0.0.1. Uses BullMQ's own Queue and Worker.
//
//   node bench.js add   --port P --jobs N --conc C    W1: Queue.add with a delay
//   node bench.js drain --port P --jobs N --conc C    W2: N ready jobs, Worker drains
//   node bench.js late  --port P --jobs N --spread S --conc C --out FILE
//                                                     W3: lateness of delayed jobs
//   node bench.js idle  --port P --jobs N --idle S --redispid PID
//                                                     W4/W6: N delayed jobs, idle CPU, memory
//
// Prints one JSON line of results on stdout.
'use strict';
const fs = require('fs');
const { Queue, Worker } = require('bullmq');

const args = { port: 6379, jobs: 1000, conc: 32, spread: 10, idle: 30, out: '', redispid: 0 };
const cmd = process.argv[2];
for (let i = 3; i + 1 < process.argv.length; i += 2) {
  const k = process.argv[i].replace(/^--/, '');
  args[k] = k === 'out' ? process.argv[i + 1] : Number(process.argv[i + 1]);
}
const connection = { host: '127.0.0.1', port: args.port, maxRetriesPerRequest: null };
const BODY = 'x'.repeat(198); // a 200-byte JSON string, like delayq's
const nowMs = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// CPU seconds of a process: its live threads' schedstat run times (ns).
function cpuOf(pid) {
  let ns = 0;
  for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
    ns += Number(fs.readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
  }
  return ns / 1e9;
}

async function usedMemory(q) {
  const c = await q.client;
  const info = await c.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)[1]);
}

async function addBulk(q, n, opts, tag) {
  for (let i = 0; i < n; i += 1000) {
    const chunk = [];
    for (let k = i; k < Math.min(n, i + 1000); k++) {
      chunk.push({ name: 'j', data: { b: BODY }, opts: { ...opts, jobId: `${tag}-${k}` } });
    }
    await q.addBulk(chunk);
  }
}

async function add() {
  const q = new Queue('w1', { connection });
  await q.waitUntilReady();
  let next = 0;
  const t0 = performance.now();
  async function lane() {
    while (next < args.jobs) {
      const i = next++;
      const delay = 600000 + Math.floor(Math.random() * 3000000);
      await q.add('j', { b: BODY }, { delay, jobId: `a-${i}`, attempts: 1 });
    }
  }
  await Promise.all(Array.from({ length: args.conc }, lane));
  const secs = (performance.now() - t0) / 1000;
  await q.close();
  return { jobs: args.jobs, secs, jobs_per_s: args.jobs / secs };
}

async function drain() {
  const q = new Queue('w2', { connection });
  await addBulk(q, args.jobs, { removeOnComplete: true, removeOnFail: true }, 'p');
  let done = 0;
  let t0 = 0;
  let finish;
  const all = new Promise((r) => (finish = r));
  t0 = performance.now();
  const w = new Worker('w2', async () => {
    done++;
    if (done === args.jobs) finish();
  }, { connection, concurrency: args.conc });
  const timeout = setTimeout(finish, 600000);
  await all;
  clearTimeout(timeout);
  const secs = (performance.now() - t0) / 1000;
  await w.close();
  await q.close();
  return { jobs: done, secs, jobs_per_s: done / secs };
}

function pct(v, p) {
  if (!v.length) return 0;
  return v[Math.round((p / 100) * (v.length - 1))];
}

async function late() {
  const q = new Queue('w3', { connection });
  await q.waitUntilReady();
  const lat = new Map();
  let finish;
  const all = new Promise((r) => (finish = r));
  const cpu0 = process.cpuUsage();
  const w = new Worker('w3', async (job) => {
    const l = nowMs() - job.data.d;
    if (!lat.has(job.data.i)) lat.set(job.data.i, l);
    if (lat.size === args.jobs) finish();
  }, { connection, concurrency: args.conc, removeOnComplete: { count: 0 } });
  await w.waitUntilReady();
  await sleep(500);
  // Producers: jobs paced evenly over `spread` seconds, each with delay 2 s.
  const delay = 2000;
  const start = performance.now();
  let next = 0;
  async function producer() {
    while (next < args.jobs) {
      const i = next++;
      const at = start + (args.spread * 1000 * i) / args.jobs;
      const wait = at - performance.now();
      if (wait > 1) await sleep(wait);
      const sent = nowMs();
      await q.add('j', { d: sent + delay, i }, { delay, jobId: `l-${i}`, removeOnComplete: true });
    }
  }
  await Promise.all(Array.from({ length: 4 }, producer));
  const grace = setTimeout(finish, delay + 5000);
  await all;
  clearTimeout(grace);
  const cpu = process.cpuUsage(cpu0);
  await w.close();
  await q.close();
  const v = [...lat.values()].sort((a, b) => a - b);
  if (args.out) fs.writeFileSync(args.out, v.map((x) => x.toFixed(3)).join('\n') + '\n');
  return {
    received: v.length, missed: args.jobs - v.length, late_p50_ms: pct(v, 50),
    late_p99_ms: pct(v, 99), late_max_ms: v.length ? v[v.length - 1] : 0,
    cpu_s: (cpu.user + cpu.system) / 1e6,
  };
}

async function idle() {
  const q = new Queue('w4', { connection });
  await q.waitUntilReady();
  const m0 = await usedMemory(q);
  const t0 = performance.now();
  await addBulk(q, args.jobs, { delay: 3600000 }, 'i');
  const loadSecs = (performance.now() - t0) / 1000;
  const m1 = await usedMemory(q);
  const w = new Worker('w4', async () => {}, { connection, concurrency: 16 });
  await w.waitUntilReady();
  await sleep(3000);
  const c0 = process.cpuUsage();
  const r0 = cpuOf(args.redispid);
  await sleep(args.idle * 1000);
  const c = process.cpuUsage(c0);
  const r1 = cpuOf(args.redispid);
  await w.close();
  await q.close();
  return {
    load_jobs_per_s: args.jobs / loadSecs, bytes_per_job: (m1 - m0) / args.jobs,
    worker_cpu_s: (c.user + c.system) / 1e6, redis_cpu_s: r1 - r0,
  };
}

const cmds = { add, drain, late, idle };
if (!cmds[cmd]) {
  console.error('usage: node bench.js add|drain|late|idle --port P ...');
  process.exit(2);
}
cmds[cmd]().then((r) => {
  console.log(JSON.stringify(r));
  process.exit(0);
}, (e) => {
  console.error(e);
  process.exit(1);
});
