// Types of delayq for Node.js (index.js). Durations are seconds, as in the
// protocol (docs/PROTOCOL.md); points in time are Unix seconds or a Date.

/** A JSON value: what a job's body may be. */
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };
/** One topic, "a,b", or a list of topics (the first non-empty one first). */
export type Topics = string | readonly string[];
/** Unix seconds or a Date. */
export type When = number | Date;

export const DEFAULT_URL: string;
/** The most ids one request may finish (batch finish, pop's `finish`). */
export const MAX_IDS: number;
export const DEFAULT_BACKOFF: readonly number[];
/** Seconds webhook-timestamp may be from now by default (300). */
export const DEFAULT_TOLERANCE: number;

/** A job handed out by pop: it is now reserved for `ttr` seconds. */
export interface Job<B = Json> {
  id: string;
  topic: string;
  /** The body exactly as added: a string stays a string. */
  body: B;
  /** Deliveries so far, this one included (1 on the first). */
  attempts: number;
  ttr: number;
  key: string | null;
  traceparent: string | null;
  tracestate: string | null;
}

/** What get and jobs tell about a live job or a kept record. */
export interface JobInfo<B = Json> {
  id: string;
  topic: string;
  state: 'delay' | 'ready' | 'reserved' | 'buried' | 'finished' | 'deleted';
  /** null for a kept record. */
  body: B | null;
  /** Unix ms: the due time while "delay", the TTR deadline while "reserved". */
  due: number | null;
  ttr: number | null;
  attempts: number;
  /** The redelivery limit; null: unlimited (and for a record). */
  retries: number | null;
  /** Unix ms. */
  created: number;
  key: string | null;
  traceparent: string | null;
  tracestate: string | null;
  firstDelivered: number | null;
  /** A record's: Unix ms when it was finished or deleted. */
  ended: number | null;
  deliveries: Array<Record<string, unknown>> | null;
  /** True for the kept record of a finished or deleted job. */
  kept: boolean;
}

/** One element of a batch answer, in request order. */
export interface Result {
  id: string;
  success: boolean;
  code: string | null;
  error: string | null;
  /** add with replace: true when replaced, false when created. */
  replaced: boolean | null;
}

export interface AddOptions {
  /** The job's id (the server makes one when left out). */
  id?: string;
  /** Seconds until it is due (or `at`; not both). */
  delay?: number;
  at?: When;
  /** Seconds a consumer has once it popped the job (server default 60). */
  ttr?: number;
  /** Redeliveries before the job is buried (default: no limit). */
  retries?: number;
  /** "stepped", or the seconds to wait after each failed delivery. */
  backoff?: 'stepped' | readonly number[];
  /** Push delivery: delayq POSTs the body there when the job is due. */
  url?: string;
  callback?: { url: string; timeout?: number };
  /** A grouping key that per-key flow limits count by. */
  key?: string;
  traceparent?: string;
  tracestate?: string;
  /** Upsert (needs id); see Client.upsert. */
  replace?: boolean;
}

export interface AddManyJob extends AddOptions {
  topic: string;
  body: Json;
}

export interface PopOptions {
  /** Long-poll seconds, 0..60. */
  timeout?: number;
  /** Aborts the request (it then rejects with the signal's reason). */
  signal?: AbortSignal;
}

export interface FinishPopOptions extends PopOptions {
  /** Ids finished first, in the same request (finish-and-pop). */
  finish: string | Iterable<string>;
}

export type Policy = Record<string, number | null>;

export interface ClientOptions {
  /** Default: $DELAYQ_URL, else http://127.0.0.1:8080; a path prefix is kept. */
  url?: string;
  /** Sent as "Authorization: Bearer ..."; default $DELAYQ_TOKEN. */
  token?: string | null;
  /** Seconds to wait for each answer, on top of a pop's long-poll (30). */
  timeout?: number;
}

export class Client {
  constructor(opts?: ClientOptions);
  readonly url: string;
  readonly token: string | null;
  readonly timeout: number;

  add(topic: string, body: Json, opts?: AddOptions): Promise<string>;
  upsert(topic: string, id: string, body: Json, opts?: Omit<AddOptions, 'id' | 'replace'>): Promise<boolean>;
  addMany(jobs: Iterable<AddManyJob>): Promise<Result[]>;
  pop<B = Json>(topics: Topics, opts?: PopOptions & { finish?: undefined }): Promise<Job<B> | null>;
  pop<B = Json>(topics: Topics, opts: FinishPopOptions): Promise<{ job: Job<B> | null; finished: Result[] }>;
  popMany<B = Json>(topics: Topics, count: number, opts?: PopOptions & { finish?: undefined }): Promise<Job<B>[]>;
  popMany<B = Json>(topics: Topics, count: number, opts: FinishPopOptions): Promise<{ jobs: Job<B>[]; finished: Result[] }>;
  finish(id: string): Promise<void>;
  finishMany(ids: Iterable<string>): Promise<Result[]>;
  delete(id: string): Promise<void>;
  deleteMany(ids: Iterable<string>): Promise<Result[]>;
  get<B = Json>(id: string): Promise<JobInfo<B>>;
  jobs<B = Json>(topic: string, state: JobInfo['state'], opts?: { limit?: number; cursor?: string | null }): Promise<{ jobs: JobInfo<B>[]; cursor: string | null }>;
  iterJobs<B = Json>(topic: string, state: JobInfo['state'], opts?: { page?: number }): AsyncGenerator<JobInfo<B>, void, undefined>;
  /** The new TTR deadline, Unix ms. */
  touch(id: string, opts?: { signal?: AbortSignal }): Promise<number>;
  release(id: string, delay?: number): Promise<'ready' | 'delay' | 'buried'>;
  bury(id: string): Promise<void>;
  kick(topic: string, count?: number): Promise<number>;
  reschedule(id: string, when: { delay: number } | { at: When }): Promise<{ state: 'delay' | 'ready'; due: number | null }>;
  purge(topic: string, state?: 'delay' | 'ready' | 'reserved' | 'buried'): Promise<number>;
  pause(topic: string): Promise<void>;
  resume(topic: string): Promise<void>;
  policy(topic: string, limits?: { concurrency?: number | null; rate?: number | null; period?: number | null; key_concurrency?: number | null; key_rate?: number | null; key_period?: number | null; keep?: number | null }): Promise<Policy>;
  policies(topic?: string): Promise<Record<string, Policy>>;
  schedule(id: string, topic: string, body: Json, opts: Omit<AddOptions, 'id' | 'delay' | 'at' | 'key' | 'replace'> & { cron?: string; every?: number; tz?: string; start?: When; end?: When }): Promise<{ id: string; next: number; replaced: boolean }>;
  unschedule(id: string): Promise<void>;
  schedules(opts?: { id?: string; preview?: number }): Promise<Array<Record<string, unknown>>>;
  stats(topic?: string): Promise<{ topics: Record<string, Record<string, number>>; total: Record<string, number> }>;
  health(): Promise<boolean>;
  metrics(): Promise<string>;
}

/** The error a failed batch Result stands for; null on success. */
export function resultError(result: Result): DelayqError | null;

export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export interface WorkerOptions {
  /** Loops, each with its own long-poll (1). */
  concurrency?: number;
  /** Seconds per long-poll, 0..60 (20). */
  pollTimeout?: number;
  /** Seconds before the 2nd, 3rd, ... delivery of a failed job; the last repeats. */
  backoff?: readonly number[];
  /** Bury a job after this many failed deliveries (default: release forever). */
  maxAttempts?: number | null;
  /** Touch the job every half TTR while its handler runs (true). */
  heartbeat?: boolean;
  /** SIGTERM and SIGINT stop the worker while run() runs (true). */
  handleSignals?: boolean;
  /** Seconds before polling again after a 5xx; doubles up to 30 (1). */
  errorPause?: number;
  /** Default: warnings and errors to the console. */
  logger?: Logger;
}

export class Worker<B = Json> {
  constructor(client: Client, topics: Topics, handler: (job: Job<B>) => unknown, opts?: WorkerOptions);
  readonly client: Client;
  /** True once stop() was called or a stop signal arrived. */
  readonly stopping: boolean;
  /** Handles jobs until stop() or a signal; rejects with a 4xx met while polling. */
  run(): Promise<void>;
  /** run() resolves after the jobs in hand are finished or released. */
  stop(): void;
  backoffFor(attempts: number): number;
}

export interface WebhookHeaders {
  [name: string]: string | string[] | undefined;
}

export class WebhookVerificationError extends Error {}

export class WebhookVerifier {
  /** "whsec_<base64>" secrets; a string may list several, space-separated. */
  constructor(secrets: string | readonly string[], opts?: { tolerance?: number });
  /** Throws WebhookVerificationError unless the request is a valid signed callback. */
  verify(headers: WebhookHeaders | Headers, body: Uint8Array | string): void;
  isValid(headers: WebhookHeaders | Headers, body: Uint8Array | string): boolean;
  /** "v1,<base64>" as delayq signs with the first secret. */
  signature(id: string, timestamp: number | string, body: Uint8Array | string): string;
}

export class DelayqError extends Error {
  constructor(message: string, opts?: { code?: string; status?: number | null; response?: Record<string, unknown> | null; cause?: unknown });
  /** The protocol's code: "bad_request", "not_found", "unavailable", "http_502", ... */
  code: string;
  /** The HTTP status; null when no answer arrived. */
  status: number | null;
  /** The decoded JSON answer when there was one. */
  response: Record<string, unknown> | null;
}
export class ClientError extends DelayqError {}
export class BadRequest extends ClientError {}
export class Unauthorized extends ClientError {}
export class NotFound extends ClientError {}
export class Conflict extends ClientError {}
export class TooLarge extends ClientError {}
export class ServerError extends DelayqError {}
export class Unavailable extends ServerError {}
export class ConnectFailed extends Unavailable {}
export class Timeout extends ServerError {}
export class ConnectionLost extends Timeout {}

export function errorFor(status: number | null, code: string | null, message: string, response?: Record<string, unknown> | null): DelayqError;
