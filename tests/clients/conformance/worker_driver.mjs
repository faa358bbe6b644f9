// The Node.js client's driver for the Worker conformance suite
// (tests/clients/test_worker_conformance.py, which documents the protocol).
//
//     node worker_driver.mjs TOKEN BEHAVIOUR TOPIC URL [BEHAVIOUR TOPIC URL ...]
//
// Runs a Worker (clients/node) once per triple, in order, on TOPIC at URL,
// with the handler and the stop that BEHAVIOUR names, and prints one JSON
// line for each: {"behaviour", "topic", "run": "returned" | "raised:<type>",
// "seconds", "calls"}.

import { Client, Worker } from '../../../clients/node/index.js';

const CLIENT_TIMEOUT = 2; // seconds: the suite's "timeout after the request was sent"
const SAFETY_STOP_MS = 15000; // a worker that does not stop by itself is stopped after this

// What a handler may throw (or reject with) in JavaScript: any value.
const RAISES = {
  Error: () => { throw new Error('the handler failed'); },
  TypeError: () => { null.f(); },
  RangeError: () => { throw new RangeError('out of range'); },
  AbortError: () => { throw new DOMException('aborted', 'AbortError'); },
  rejection: () => Promise.reject(new Error('the async handler failed')),
  string: () => { throw 'a plain string'; }, // eslint-disable-line no-throw-literal
  undefined: () => { throw undefined; }, // eslint-disable-line no-throw-literal
};

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// A stop() that lands as the pop has returned with a job, before the
// Worker handles it: the pop itself is wrapped (one thread: nothing else
// can run between the answer and the Worker's next step).
function forceStopAsPopReturns(worker) {
  const { client } = worker;
  const realPop = client.pop.bind(client);
  let done = false;
  client.pop = async (...args) => {
    const answer = await realPop(...args);
    const job = answer && 'finished' in answer ? answer.job : answer;
    if (job && !done) {
      done = true;
      worker.stop();
    }
    return answer;
  };
}

function makeWorker(behaviour, topic, url, token) {
  const calls = [];
  const client = new Client({ url, token, timeout: CLIENT_TIMEOUT });
  let worker = null;
  const handler = (job) => {
    calls.push(job.id);
    if (['stop-in-handler', 'stop-in-handler-then-raise'].includes(behaviour)
        || behaviour.startsWith('raise:')) {
      worker.stop();
    } else if (behaviour === 'stop-after-handler') {
      setTimeout(() => worker.stop(), 300);
    }
    if (behaviour === 'stop-in-handler-then-raise') return RAISES.Error();
    if (behaviour.startsWith('raise:')) return RAISES[behaviour.slice('raise:'.length)]();
    return undefined;
  };
  const pollTimeout = behaviour === 'stop-during-poll' ? 20 : 2;
  worker = new Worker(client, [topic], handler, {
    backoff: [600], pollTimeout, handleSignals: false, logger: quiet,
  });
  return { worker, calls };
}

// The Worker's own lines go to stderr: stdout carries the JSON results.
const quiet = {
  debug() {}, info() {}, warn: (m) => console.error(m), error: (m) => console.error(m),
};

async function runOne(behaviour, topic, url, token) {
  const { worker, calls } = makeWorker(behaviour, topic, url, token);
  if (behaviour === 'stop-before-pop') worker.stop();
  else if (behaviour === 'stop-during-poll') setTimeout(() => worker.stop(), 500);
  else if (behaviour === 'stop-as-pop-returns') forceStopAsPopReturns(worker);
  const safety = setTimeout(() => worker.stop(), SAFETY_STOP_MS);
  const t0 = performance.now();
  let run = 'returned';
  try {
    await worker.run();
  } catch (e) {
    run = `raised:${e?.name ?? typeof e}`;
  } finally {
    clearTimeout(safety);
  }
  return {
    behaviour, topic, run, seconds: Math.round(performance.now() - t0) / 1000, calls: calls.length,
  };
}

const [token, ...specs] = process.argv.slice(2);
for (let i = 0; i < specs.length; i += 3) {
  const [behaviour, topic, url] = specs.slice(i, i + 3);
  console.log(JSON.stringify(await runOne(behaviour, topic, url, token === '-' ? null : token)));
}
await sleep(0);
