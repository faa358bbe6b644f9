// A consumer loop: long-poll, handle, finish (on the next long-poll:
// finish-and-pop); touch the job while its handler runs; release with a
// stepped backoff when the handler fails; stop cleanly on SIGTERM/SIGINT.
// The same behaviour as the Python, PHP and Java Workers (their READMEs).

import { MAX_IDS, resultError } from './client.js';
import { BadRequest, ClientError, Conflict, DelayqError, NotFound, ServerError, Unavailable }
  from './errors.js';

/** Seconds before the 2nd, 3rd, 4th, 5th (and every later) delivery. */
export const DEFAULT_BACKOFF = Object.freeze([15, 180, 600, 1800]);

const MAX_PAUSE = 30;

const QUIET_LOGGER = {
  debug() {}, info() {}, warn: (...a) => console.warn(...a), error: (...a) => console.error(...a),
};

// Waits `ms`, or less when `signal` aborts.
const sleep = (ms, signal) => new Promise((resolve) => {
  if (signal.aborted) return resolve();
  const done = () => {
    clearTimeout(t);
    signal.removeEventListener('abort', done);
    resolve();
  };
  const t = setTimeout(done, ms);
  signal.addEventListener('abort', done);
  return undefined;
});

const describe = (e) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e));

export class Worker {
  /**
   * Runs `handler(job)` (sync or async) for every job of `topics`.
   * opts: concurrency (1), pollTimeout (20 s), backoff (DEFAULT_BACKOFF),
   * maxAttempts (none), heartbeat (true: touch every half TTR while the
   * handler runs), handleSignals (true), errorPause (1 s), logger.
   */
  constructor(client, topics, handler, {
    concurrency = 1, pollTimeout = 20, backoff = DEFAULT_BACKOFF, maxAttempts = null,
    heartbeat = true, handleSignals = true, errorPause = 1, logger = QUIET_LOGGER,
  } = {}) {
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new RangeError('concurrency must be an integer >= 1');
    }
    if (!(pollTimeout >= 0 && pollTimeout <= 60)) throw new RangeError('pollTimeout must be 0..60 seconds');
    if (backoff.some((s) => !(s >= 0))) throw new RangeError('backoff steps must be >= 0');
    if (maxAttempts !== null && !(maxAttempts >= 1)) throw new RangeError('maxAttempts must be >= 1');
    this.client = client;
    this.topics = topics;
    this.handler = handler;
    this.concurrency = concurrency;
    this.pollTimeout = pollTimeout;
    this.backoff = [...backoff];
    this.maxAttempts = maxAttempts;
    this.heartbeat = heartbeat;
    this.handleSignals = handleSignals;
    this.errorPause = errorPause;
    this.log = logger;
    this.stopping = false;
    // Aborted by stop(): cuts the long-polls and the error pauses short.
    this.#stopped = new AbortController();
    // False once the server refused `finish` on pop (an older delayq).
    this.#carry = true;
  }

  #stopped;

  #carry;

  #fatal = null;

  /** Asks run() to resolve after the jobs in hand (safe from anywhere, a handler too). */
  stop() {
    if (this.stopping) return;
    this.stopping = true;
    this.#stopped.abort(new DOMException('the worker is stopping', 'AbortError'));
  }

  /** Seconds before the next delivery of a job that failed on delivery `attempts` (1 = first). */
  backoffFor(attempts) {
    if (this.backoff.length === 0) return 0;
    return this.backoff[Math.min(Math.max(attempts, 1), this.backoff.length) - 1];
  }

  /** Handles jobs until stop() or SIGTERM/SIGINT; rejects with a 4xx met while polling. */
  async run() {
    const restore = this.#installSignals();
    try {
      this.log.info(`delayq worker started on ${this.topics} (concurrency ${this.concurrency})`);
      const loops = Array.from({ length: this.concurrency }, (_, n) => this.#loop(n));
      await Promise.all(loops);
      if (this.#fatal) throw this.#fatal;
      this.log.info('delayq worker stopped');
    } finally {
      restore();
    }
  }

  // One of `concurrency` loops, each with its own long-poll and pending finishes.
  async #loop(n) {
    // Jobs handled and not yet finished, by id: their finish rides on the
    // next pop. maybeDone: a request that may have finished it already went
    // out (a 504, a lost connection, a cut poll), so a not_found is no news.
    const pending = new Map();
    let pause = this.errorPause;
    try {
      while (!this.stopping) {
        let job;
        try {
          job = await this.#poll(pending);
        } catch (e) {
          if (!(e instanceof ServerError)) throw e;
          this.log.warn(`delayq worker ${n}: pop failed: ${e.message}; trying again in ${pause} s`);
          await sleep(pause * 1000, this.#stopped.signal);
          pause = Math.min(Math.max(pause, 0.1) * 2, MAX_PAUSE);
          continue;
        }
        pause = this.errorPause;
        if (job) await this.#handle(job, pending);
      }
    } catch (e) {
      // A 4xx while polling (a bad topic, a refused token): every loop stops.
      this.#fatal ??= e;
      this.stop();
    } finally {
      await this.#flush(pending);
    }
  }

  async #poll(pending) {
    if (this.stopping) return null;
    const carried = this.#carry ? [...pending.keys()].slice(0, MAX_IDS) : [];
    const opts = { timeout: this.pollTimeout, signal: this.#stopped.signal };
    let answer;
    try {
      answer = carried.length
        ? await this.client.pop(this.topics, { ...opts, finish: carried })
        : { job: await this.client.pop(this.topics, opts), finished: [] };
    } catch (e) {
      if (e?.name === 'AbortError' || e instanceof ServerError) {
        // cut short by stop(), a 504, a lost connection: maybe finished;
        // a 503 finished nothing. Either way they are carried again.
        if (!(e instanceof Unavailable)) for (const id of carried) pending.get(id).maybeDone = true;
        if (e?.name === 'AbortError') return null;
        throw e;
      }
      if (e instanceof BadRequest && carried.length && e.message.includes("'finish'")) {
        this.log.warn(`the server does not take finish on pop (${e.message}); finishing each job `
          + 'with a request of its own');
        this.#carry = false;
        await this.#flush(pending);
        return null;
      }
      throw e;
    }
    this.#settle(pending, carried, answer.finished);
    return answer.job;
  }

  // The `finished` outcomes of a pop that carried `carried`.
  #settle(pending, carried, finished) {
    const outcome = new Map(finished.map((r) => [r.id, r]));
    for (const id of carried) {
      const entry = pending.get(id);
      const r = outcome.get(id);
      if (r && (r.code === 'unavailable' || r.code === 'timeout')) {
        // that id's shard failed (several shards): carried again
        entry.maybeDone ||= r.code === 'timeout';
        this.log.warn(`finishing job ${id} failed: ${r.error}; trying again with the next pop`);
        continue;
      }
      pending.delete(id);
      if (!r) {
        this.log.error(`the server did not say whether job ${id} was finished; it will be `
          + 'delivered again after its TTR if it was not');
      } else if (r.success) {
        this.log.debug(`job ${id} finished (attempt ${entry.job.attempts})`);
      } else if (r.code === 'not_found') {
        this.#gone(entry.job, entry.maybeDone);
      } else {
        this.log.error(`finishing job ${id} failed: ${resultError(r).message}; it will be `
          + 'delivered again after its TTR');
      }
    }
  }

  async #handle(job, pending) {
    const stopBeat = this.#beat(job);
    let failure = null;
    try {
      await this.handler(job);
    } catch (e) {
      failure = e ?? new Error('the handler threw undefined');
    } finally {
      await stopBeat();
    }
    if (failure) {
      await this.#failed(job, failure);
    } else if (this.#carry) {
      pending.set(job.id, { job, maybeDone: false });
    } else {
      await this.#finish(job, false);
    }
  }

  // Touches the job every half TTR while its handler runs; the returned
  // function stops that and waits for a touch in flight.
  #beat(job) {
    if (!this.heartbeat || !(job.ttr > 0)) return async () => {};
    let inFlight = Promise.resolve();
    const timer = setInterval(() => {
      inFlight = this.client.touch(job.id).then(
        () => this.log.debug(`job ${job.id} touched`),
        (e) => this.log.warn(`touching job ${job.id} failed: ${e.message}${e instanceof Conflict
          || e instanceof NotFound ? ' (it is no longer reserved: its TTR passed, or it was deleted)'
          : ''}`),
      );
    }, job.ttr * 500);
    return async () => {
      clearInterval(timer);
      await inFlight;
    };
  }

  // Sends the pending finishes, each with a request of its own.
  async #flush(pending) {
    for (const [id, { job, maybeDone }] of pending) {
      pending.delete(id);
      try {
        await this.#finish(job, maybeDone);
      } catch (e) {
        this.log.error(`finishing job ${id} failed: ${e.message}; it will be delivered again `
          + 'after its TTR');
      }
    }
  }

  async #finish(job, maybeDone) {
    try {
      await this.client.finish(job.id);
      this.log.debug(`job ${job.id} finished (attempt ${job.attempts})`);
    } catch (e) {
      if (e instanceof NotFound) return this.#gone(job, maybeDone);
      if (e instanceof ClientError || !(e instanceof DelayqError)) throw e;
      this.log.error(`finishing job ${job.id} failed: ${e.message}; it will be delivered again `
        + 'after its TTR');
    }
    return undefined;
  }

  #gone(job, maybeDone) {
    if (maybeDone) {
      this.log.debug(`job ${job.id} was finished already (by a request whose answer was lost)`);
    } else {
      this.log.warn(`job ${job.id} was gone before it could be finished (deleted, or its TTR of `
        + `${job.ttr} s had passed and another delivery finished it)`);
    }
  }

  // The handler failed: release with the backoff step, or bury.
  async #failed(job, exc) {
    const what = describe(exc);
    try {
      if (this.maxAttempts !== null && job.attempts >= this.maxAttempts) {
        await this.client.bury(job.id);
        this.log.error(`job ${job.id} failed on attempt ${job.attempts} (${what}); buried after `
          + `${job.attempts} attempts`);
        return;
      }
      const delay = this.backoffFor(job.attempts);
      const state = await this.client.release(job.id, delay);
      if (state === 'buried') {
        this.log.error(`job ${job.id} failed on attempt ${job.attempts} (${what}); buried: its `
          + 'retries are used up');
      } else {
        this.log.warn(`job ${job.id} failed on attempt ${job.attempts} (${what}); retry in ${delay} s`);
      }
    } catch (e) {
      if (e instanceof Conflict || e instanceof NotFound) {
        this.log.warn(`job ${job.id} failed on attempt ${job.attempts} (${what}) and was no longer `
          + `reserved (its TTR of ${job.ttr} s passed, or it was deleted)`);
      } else if (e instanceof DelayqError && !(e instanceof ClientError)) {
        this.log.error(`job ${job.id} failed on attempt ${job.attempts} (${what}); giving it back `
          + `failed too (${e.message}): it will be delivered again after its TTR`);
      } else {
        throw e;
      }
    }
  }

  // SIGTERM/SIGINT stop the worker; a second SIGINT exits at once (the
  // default action, re-raised with our listener removed).
  #installSignals() {
    if (!this.handleSignals) return () => {};
    const onSignal = (sig) => {
      if (this.stopping && sig === 'SIGINT') {
        process.removeListener('SIGINT', onSignal);
        process.kill(process.pid, 'SIGINT');
        return;
      }
      this.log.info(`delayq worker: ${sig}, stopping after the jobs in hand`);
      this.stop();
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    return () => {
      process.removeListener('SIGTERM', onSignal);
      process.removeListener('SIGINT', onSignal);
    };
  }
}
