// The delayq HTTP client: every command of docs/PROTOCOL.md over Node's
// own fetch (Node 18+), no dependency. Durations are seconds, as in the
// protocol; points in time are Unix seconds or a Date.

import { ConnectFailed, ConnectionLost, Conflict, ServerError, errorFor } from './errors.js';

export const DEFAULT_URL = 'http://127.0.0.1:8080';
export const USER_AGENT = 'delayq-node/0.1.0';
/** The most ids one request may finish (batch finish, pop's `finish`). */
export const MAX_IDS = 1000;

// Commands whose resend cannot change anything beyond what the first send
// did: after a keep-alive connection was dropped under one, it is sent once
// more (as the Python client does).
const RESEND_SAFE = new Set(['get', 'jobs', 'stats', 'touch', 'pause', 'resume', 'health',
  'metrics']);

// Codes of Node's network errors that mean nothing reached the server.
const NOT_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH',
  'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);
// ...and those of a connection the server closed under the request.
const DROPPED = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED']);

/**
 * A signal aborted when `outer` or `inner` is (AbortSignal.any is Node 20
 * only), and a function that drops its listeners: `outer` may be a
 * long-lived one (the Worker's stop) shared by every request.
 */
function eitherSignal(outer, inner) {
  if (outer.aborted || inner.aborted) return { signal: outer.aborted ? outer : inner, done() {} };
  const both = new AbortController();
  const onOuter = () => both.abort(outer.reason);
  const onInner = () => both.abort(inner.reason);
  outer.addEventListener('abort', onOuter, { once: true });
  inner.addEventListener('abort', onInner, { once: true });
  return {
    signal: both.signal,
    done() {
      outer.removeEventListener('abort', onOuter);
      inner.removeEventListener('abort', onInner);
    },
  };
}

const seconds = (v) => (v instanceof Date ? v.getTime() / 1000 : v);

// add's options: the protocol's job fields less topic and body (checked
// against the server's table by tests/clients/test_client_fields.py).
const ADD_OPTIONS = ['id', 'delay', 'at', 'ttr', 'retries', 'backoff', 'callback', 'url', 'key',
  'traceparent', 'tracestate', 'replace'];

/** The wire fields of one job, from add's arguments; an unknown option is a TypeError. */
function jobFields(topic, body, opts = {}) {
  const unknown = Object.keys(opts).filter((k) => !ADD_OPTIONS.includes(k));
  if (unknown.length) {
    throw new TypeError(`unknown add option(s) ${unknown.join(', ')}; known: ${ADD_OPTIONS.join(', ')}`);
  }
  const job = { topic, body };
  const { id, delay, at, ttr, retries, backoff, callback, url, key, traceparent, tracestate,
    replace } = opts;
  const set = (name, v) => { if (v !== undefined && v !== null) job[name] = v; };
  set('id', id);
  if (replace) job.replace = true;
  set('key', key);
  set('traceparent', traceparent);
  set('tracestate', tracestate);
  set('delay', delay);
  set('at', at === undefined || at === null ? at : seconds(at));
  set('ttr', ttr);
  set('retries', retries);
  set('backoff', backoff);
  set('callback', callback);
  set('url', url);
  return job;
}

function topicFields(topics) {
  return typeof topics === 'string' ? { topic: topics } : { topics: [...topics] };
}

function toJob(d) {
  return {
    id: d.id, topic: d.topic, body: d.value, attempts: d.attempts, ttr: d.ttr,
    key: d.key ?? null, traceparent: d.traceparent ?? null, tracestate: d.tracestate ?? null,
  };
}

function toJobInfo(a) {
  return {
    id: a.id, topic: a.topic, state: a.state, body: a.value ?? null, due: a.due ?? null,
    ttr: a.ttr ?? null, attempts: a.attempts, retries: a.retries ?? null, created: a.created,
    key: a.key ?? null, traceparent: a.traceparent ?? null, tracestate: a.tracestate ?? null,
    firstDelivered: a.first_delivered ?? null, ended: a.ended ?? null,
    deliveries: a.deliveries ?? null, kept: a.ended != null,
  };
}

function toResults(list) {
  return (list ?? []).map((r) => ({
    id: r.id, success: Boolean(r.success), code: r.code ?? null, error: r.error ?? null,
    replaced: r.replaced ?? null,
  }));
}

/** The error a failed batch Result stands for, null on success. */
export function resultError(result) {
  if (result.success) return null;
  return errorFor(null, result.code, result.error || `job ${result.id} failed`);
}

function finishedOf(answer) {
  if (!Array.isArray(answer.finished)) {
    throw new ServerError("the server's pop answer has no 'finished' list although 'finish' "
      + 'was sent', { code: 'internal', status: 200, response: answer });
  }
  return toResults(answer.finished);
}

/** The ids of pop's `finish`: a string stays one id, anything else a list. */
const finishField = (finish) => (typeof finish === 'string' ? finish : [...finish]);

function decode(status, text) {
  let obj = null;
  try {
    obj = JSON.parse(text);
  } catch {
    obj = null;
  }
  if (obj !== null && typeof obj === 'object' && !Array.isArray(obj)) {
    if (obj.success === true && status === 200) return obj;
    if (obj.success === false || status !== 200) {
      const msg = typeof obj.error === 'string' && obj.error
        ? obj.error : `request failed with HTTP ${status}`;
      throw errorFor(status, typeof obj.code === 'string' ? obj.code : null, msg, obj);
    }
  }
  const head = text.slice(0, 200).trim();
  if (status === 200) {
    throw new ServerError(`the server answered 200 without a delayq JSON object: ${head}`,
      { code: 'internal', status });
  }
  throw errorFor(status, null, `HTTP ${status}: ${head || '(empty body)'}`);
}

export class Client {
  /**
   * @param {{url?: string, token?: string|null, timeout?: number}} [opts]
   *   url: default $DELAYQ_URL, else http://127.0.0.1:8080 (a path prefix is kept);
   *   token: sent as "Authorization: Bearer ..." (default $DELAYQ_TOKEN);
   *   timeout: seconds to wait for each answer (a long-poll pop waits that
   *   long on top of its own timeout); default 30.
   */
  constructor({ url, token, timeout = 30 } = {}) {
    url = url || process.env.DELAYQ_URL || DEFAULT_URL;
    if (!url.includes('://')) url = `http://${url}`;
    let parsed;
    try {
      parsed = new URL(url);
    } catch {
      parsed = null;
    }
    if (!parsed || !['http:', 'https:'].includes(parsed.protocol) || !parsed.hostname) {
      throw new TypeError(`delayq url must be http://host[:port][/prefix] or https://..., not ${url}`);
    }
    if (!(timeout > 0)) throw new RangeError('timeout must be > 0 seconds');
    this.url = url;
    this.base = parsed.origin + parsed.pathname.replace(/\/+$/, '');
    this.token = token === undefined ? (process.env.DELAYQ_TOKEN || null) : token;
    this.timeout = timeout;
  }

  // ------------------------------------------------------------ jobs

  /**
   * Adds a job; resolves to its id (the server makes one when none is given).
   * opts: id, delay, at, ttr, retries, backoff, callback, url, key,
   * traceparent, tracestate, replace (see README).
   */
  async add(topic, body, opts = {}) {
    return String((await this.#add(jobFields(topic, body, opts))).id);
  }

  /** Replaces the pending job `id` of `topic`, or creates it: true when it replaced one. */
  async upsert(topic, id, body, opts = {}) {
    const answer = await this.#add(jobFields(topic, body, { ...opts, id, replace: true }));
    return Boolean(answer.replaced);
  }

  // An add that names its id is sent again after a dropped connection; a
  // Conflict on that resend means the first send took (an upsert's
  // conflict is always real).
  async #add(fields) {
    const explicit = fields.id !== undefined;
    const { status, text, resent } = await this.#send('add', fields, { resend: explicit });
    try {
      return decode(status, text);
    } catch (e) {
      if (e instanceof Conflict && resent && explicit && !fields.replace) return { id: fields.id };
      throw e;
    }
  }

  /** Adds 1..1000 jobs ({topic, body, ...add's opts}); one Result per job, in order. */
  async addMany(jobs) {
    const batch = [...jobs].map(({ topic, body, ...opts }) => jobFields(topic, body, opts));
    if (batch.length === 0) return [];
    return toResults((await this.#call('add', { jobs: batch })).results);
  }

  /**
   * Reserves the next ready job of the first non-empty topic, waiting up
   * to `timeout` seconds (0..60); null when none came. With `finish` (an
   * id or ids finished first, in the same request) it resolves to
   * {job, finished: Result[]}.
   */
  async pop(topics, { timeout = 0, finish, signal } = {}) {
    const { answer, ids } = await this.#pop(topics, undefined, timeout, finish, signal);
    const job = answer.id == null ? null : toJob(answer);
    if (ids === undefined) return job;
    return { job, finished: ids.length ? finishedOf(answer) : [] };
  }

  /** Up to `count` (1..100) jobs; with `finish`, {jobs, finished}. */
  async popMany(topics, count, { timeout = 0, finish, signal } = {}) {
    const { answer, ids } = await this.#pop(topics, count, timeout, finish, signal);
    const jobs = (answer.jobs ?? []).map(toJob);
    if (ids === undefined) return jobs;
    return { jobs, finished: ids.length ? finishedOf(answer) : [] };
  }

  async #pop(topics, count, timeout, finish, signal) {
    const fields = topicFields(topics);
    if (count !== undefined) fields.count = count;
    if (timeout) fields.timeout = timeout;
    const ids = finish === undefined || finish === null ? undefined : finishField(finish);
    if (ids !== undefined && ids.length) fields.finish = ids;
    const answer = await this.#call('pop', fields, { wait: timeout, signal });
    return { answer, ids };
  }

  /** Removes a job (done), whatever its state; NotFound if unknown. */
  async finish(id) { await this.#call('finish', { id }); }

  /** Finishes 1..1000 jobs; one Result per id, in order. */
  async finishMany(ids) { return this.#batch('finish', ids); }

  /** Removes a job (cancelled), whatever its state; NotFound if unknown. */
  async delete(id) { await this.#call('delete', { id }); }

  async deleteMany(ids) { return this.#batch('delete', ids); }

  async #batch(command, ids) {
    const list = [...ids];
    if (list.length === 0) return [];
    return toResults((await this.#call(command, { ids: list })).results);
  }

  /** A live job, or the kept record of a finished or deleted one (`kept`). */
  async get(id) { return toJobInfo(await this.#call('get', { id })); }

  /** One page of the topic's jobs in `state`: {jobs, cursor} (cursor null on the last). */
  async jobs(topic, state, { limit, cursor } = {}) {
    const fields = { topic, state };
    if (limit !== undefined) fields.limit = limit;
    if (cursor) fields.cursor = cursor;
    const answer = await this.#call('jobs', fields);
    return { jobs: (answer.jobs ?? []).map(toJobInfo), cursor: answer.cursor ?? null };
  }

  /** Every job of the topic in `state`, page after page. */
  async* iterJobs(topic, state, { page = 100 } = {}) {
    let cursor = null;
    do {
      const answer = await this.jobs(topic, state, { limit: page, cursor });
      yield* answer.jobs;
      ({ cursor } = answer);
    } while (cursor);
  }

  /** Restarts a reserved job's TTR; its new deadline (Unix ms). Conflict if not reserved. */
  async touch(id, { signal } = {}) {
    return Number((await this.#call('touch', { id }, { signal })).due);
  }

  /** Gives a reserved job back, due in `delay` s: "ready", "delay" or "buried". */
  async release(id, delay = 0) {
    return String((await this.#call('release', { id, delay })).state);
  }

  /** Sets a reserved job aside: pop skips it until kick. */
  async bury(id) { await this.#call('bury', { id }); }

  /** Makes up to `count` buried jobs of the topic ready; how many. */
  async kick(topic, count = 1) {
    return Number((await this.#call('kick', { topic, count })).kicked);
  }

  /** A delayed, ready or buried job gets a new due time: {state, due}. */
  async reschedule(id, { delay, at } = {}) {
    if ((delay === undefined) === (at === undefined)) {
      throw new TypeError('reschedule needs delay or at (one of them)');
    }
    const fields = { id };
    if (delay !== undefined) fields.delay = delay;
    if (at !== undefined) fields.at = seconds(at);
    const answer = await this.#call('reschedule', fields);
    return { state: String(answer.state), due: answer.due ?? null };
  }

  /** Deletes the topic's jobs in `state` (every state when omitted); how many. */
  async purge(topic, state) {
    const fields = { topic };
    if (state !== undefined) fields.state = state;
    return Number((await this.#call('purge', fields)).purged);
  }

  async pause(topic) { await this.#call('pause', { topic }); }

  async resume(topic) { await this.#call('resume', { topic }); }

  // ------------------------------------------------------------ flow control

  /** Sets a topic's policy (a limit left out stays, null removes it); the policy as it stands. */
  async policy(topic, limits = {}) {
    return (await this.#call('policy', { topic, ...limits })).policy;
  }

  /** {topic: policy} for one topic or every topic with a policy (all pages). */
  async policies(topic) {
    if (topic !== undefined) return (await this.#call('policies', { topic })).policies;
    const out = {};
    let cursor = null;
    do {
      const answer = await this.#call('policies', cursor ? { cursor } : {});
      Object.assign(out, answer.policies);
      cursor = answer.cursor;
    } while (cursor);
    return out;
  }

  // ------------------------------------------------------------ periodic jobs

  /** Creates or replaces the periodic job `id` ({cron | every, tz, start, end, ...add's opts}). */
  async schedule(id, topic, body, { cron, every, tz, start, end, ...job } = {}) {
    const fields = { ...jobFields(topic, body, job), id };
    for (const [k, v] of Object.entries({ cron, every, tz })) if (v !== undefined) fields[k] = v;
    for (const [k, v] of Object.entries({ start, end })) {
      if (v !== undefined) fields[k] = Math.floor(seconds(v));
    }
    const { success, ...answer } = await this.#call('schedule', fields);
    return answer;
  }

  async unschedule(id) { await this.#call('unschedule', { id }); }

  async schedules({ id, preview } = {}) {
    const fields = {};
    if (id !== undefined) fields.id = id;
    if (preview !== undefined) fields.preview = preview;
    return (await this.#call('schedules', fields)).schedules;
  }

  // ------------------------------------------------------------ observing

  /** {topics: {name: counters}, total: counters}, for one topic or all. */
  async stats(topic) {
    const { success, ...answer } = await this.#call('stats', topic === undefined ? {} : { topic });
    return answer;
  }

  /** True when delayq answers and reaches Redis; false on a 5xx or no connection. */
  async health() {
    try {
      const { status, text } = await this.#send('health', null);
      decode(status, text);
      return true;
    } catch (e) {
      if (e instanceof ServerError) return false;
      throw e;
    }
  }

  /** The Prometheus text of /metrics. */
  async metrics() {
    const { status, text } = await this.#send('metrics', null);
    if (status !== 200) decode(status, text);
    return text;
  }

  // ------------------------------------------------------------ transport

  async #call(command, fields, opts = {}) {
    const { status, text } = await this.#send(command, fields, opts);
    return decode(status, text);
  }

  /**
   * One request: {status, text, resent}. A POST when `fields` is given,
   * else a GET. A connection the server dropped under the request is
   * retried once on a new one only when that is harmless (RESEND_SAFE, or
   * `resend`); otherwise ConnectionLost. `signal` aborts the request: the
   * promise then rejects with the signal's reason (an AbortError).
   */
  async #send(command, fields, { wait = 0, resend = false, signal } = {}) {
    resend = resend || RESEND_SAFE.has(command);
    const headers = { 'User-Agent': USER_AGENT, Accept: 'application/json' };
    if (fields !== null) headers['Content-Type'] = 'application/json';
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const limit = this.timeout + Math.max(0, wait);
    const body = fields === null ? undefined : JSON.stringify(fields);
    for (let attempt = 0; ; attempt++) {
      const timer = AbortSignal.timeout(Math.ceil(limit * 1000));
      const both = signal ? eitherSignal(signal, timer) : { signal: timer, done() {} };
      try {
        const res = await fetch(this.base + '/' + command, {
          method: fields === null ? 'GET' : 'POST', headers, body, signal: both.signal,
        });
        return { status: res.status, text: await res.text(), resent: attempt > 0 };
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        if (timer.aborted) {
          throw new ConnectionLost(`no answer from delayq within ${limit} s; the outcome of the `
            + 'request is unknown', { cause: e });
        }
        const code = e?.cause?.code ?? e?.code;
        if (NOT_CONNECTED.has(code)) {
          throw new ConnectFailed(`cannot connect to delayq at ${this.url}: ${code}`, { cause: e });
        }
        if (attempt === 0 && resend && DROPPED.has(code)) continue;
        throw new ConnectionLost(`the connection to delayq failed (${code ?? e?.message}); the `
          + 'outcome of the request is unknown', { cause: e });
      } finally {
        both.done();
      }
    }
  }
}
