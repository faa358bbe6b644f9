<?php

declare(strict_types=1);

namespace Delayq;

/**
 * A delayq client: one method per command of the wire protocol (docs/PROTOCOL.md).
 *
 * One Client keeps one curl handle, so consecutive requests reuse one
 * keep-alive connection. A Client is not meant to be shared between
 * processes; after a fork the child makes its own connection.
 *
 * Bodies: a PHP string is sent as a JSON string and comes back from pop as
 * the same string; arrays and objects are sent as JSON arrays/objects and come
 * back decoded (associative arrays by default, stdClass with 'assoc' => false);
 * numbers, booleans and null keep their type.
 *
 * Every failure throws a DelayqException subclass (see that class).
 */
final class Client
{
    public const DEFAULT_URL = 'http://127.0.0.1:8080';

    /** Fields an add (or one job of addMany) may carry besides topic and body. */
    private const ADD_OPTIONS = [
        'id', 'delay', 'at', 'ttr', 'retries', 'backoff', 'callback', 'url', 'key',
        'traceparent', 'tracestate', 'replace',
    ];

    private const CLIENT_OPTIONS = ['token', 'timeout', 'connect_timeout', 'assoc', 'user_agent', 'curl_options'];

    private const JSON_FLAGS = JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION;

    /** Exception class of each protocol error code. */
    private const CODE_CLASSES = [
        'bad_request' => BadRequestException::class,
        'unauthorized' => UnauthorizedException::class,
        'not_found' => NotFoundException::class,
        'conflict' => ConflictException::class,
        'too_large' => TooLargeException::class,
        'unavailable' => UnavailableException::class,
        'timeout' => TimeoutException::class,
    ];

    /** The same by HTTP status, for an answer without a known code. */
    private const STATUS_CLASSES = [
        400 => BadRequestException::class,
        401 => UnauthorizedException::class,
        403 => UnauthorizedException::class,
        404 => NotFoundException::class,
        409 => ConflictException::class,
        413 => TooLargeException::class,
        503 => UnavailableException::class,
        504 => TimeoutException::class,
    ];

    /**
     * curl errors that happen before the request leaves: nothing was sent,
     * the request had no effect (ConnectionException). Any other transport
     * error may come after the server got the request (ConnectionLostException).
     */
    private const CURL_NOT_SENT = [
        1,  // CURLE_UNSUPPORTED_PROTOCOL
        3,  // CURLE_URL_MALFORMAT
        5,  // CURLE_COULDNT_RESOLVE_PROXY
        6,  // CURLE_COULDNT_RESOLVE_HOST
        7,  // CURLE_COULDNT_CONNECT
        35, // CURLE_SSL_CONNECT_ERROR
        51, // CURLE_PEER_FAILED_VERIFICATION (older libcurl)
        58, // CURLE_SSL_CERTPROBLEM
        59, // CURLE_SSL_CIPHER
        60, // CURLE_PEER_FAILED_VERIFICATION / CURLE_SSL_CACERT
        77, // CURLE_SSL_CACERT_BADFILE
    ];

    /** @var string */
    private $url;
    /** @var string|null */
    private $token;
    /** @var float */
    private $timeout;
    /** @var float */
    private $connectTimeout;
    /** @var bool */
    private $assoc;
    /** @var string */
    private $userAgent;
    /** @var array<int,mixed> */
    private $curlOptions;
    /** @var resource|\CurlHandle|null */
    private $curl;
    /** @var int */
    private $curlPid = 0;
    /** @var list<string> */
    private $curlHeaders = [];
    /** @var callable|null */
    private $abortCheck;

    /**
     * @param string $url where nginx serves delayq, e.g. "http://127.0.0.1:8080"
     *                    (a path prefix such as "https://host/delayq" works too)
     * @param array{token?:?string,timeout?:float,connect_timeout?:float,assoc?:bool,user_agent?:string,curl_options?:array<int,mixed>} $options
     *   token:           bearer token sent as "Authorization: Bearer <token>" (default none)
     *   timeout:         seconds allowed for an answer (default 10); a pop with a long-poll
     *                    timeout gets that many seconds more
     *   connect_timeout: seconds allowed to connect (default 3)
     *   assoc:           decode JSON objects in job bodies as arrays (true, default) or stdClass
     *   user_agent:      User-Agent header (default "delayq-php")
     *   curl_options:    extra CURLOPT_* => value for every request (TLS settings, proxy, ...)
     */
    public function __construct(string $url = self::DEFAULT_URL, array $options = [])
    {
        $unknown = array_diff(array_keys($options), self::CLIENT_OPTIONS);
        if ($unknown) {
            throw new \InvalidArgumentException('unknown Client option(s): ' . implode(', ', $unknown)
                . '; known: ' . implode(', ', self::CLIENT_OPTIONS));
        }
        if (!preg_match('~^https?://~i', $url)) {
            throw new \InvalidArgumentException("the delayq URL must start with http:// or https://, got '$url'");
        }
        $this->url = rtrim($url, '/');
        $token = $options['token'] ?? null;
        $this->token = ($token === null || $token === '') ? null : (string) $token;
        $this->timeout = (float) ($options['timeout'] ?? 10.0);
        $this->connectTimeout = (float) ($options['connect_timeout'] ?? 3.0);
        if ($this->timeout <= 0 || $this->connectTimeout <= 0) {
            throw new \InvalidArgumentException('timeout and connect_timeout must be > 0 seconds');
        }
        $this->assoc = (bool) ($options['assoc'] ?? true);
        $this->userAgent = (string) ($options['user_agent'] ?? 'delayq-php');
        $this->curlOptions = (array) ($options['curl_options'] ?? []);
    }

    public function __destruct()
    {
        $this->close();
    }

    /** Closes the keep-alive connection; the next request opens a new one. */
    public function close(): void
    {
        if ($this->curl !== null) {
            if (PHP_VERSION_ID < 80000) {
                curl_close($this->curl);
            }
            $this->curl = null;
        }
    }

    public function getUrl(): string
    {
        return $this->url;
    }

    // ------------------------------------------------------------ producers

    /**
     * Adds one job; returns its id (the one given, or the one the server made).
     *
     * @param mixed $body any JSON-encodable value; a string stays a string
     * @param array{id?:string,delay?:float|int,at?:float|int,ttr?:float|int,retries?:int,backoff?:string|list<float|int>,callback?:array{url:string,timeout?:float|int},url?:string,key?:string,traceparent?:string,tracestate?:string,replace?:bool} $options
     *   id:      the job id (recommended: topic + business id); a live id is a ConflictException
     *   replace: true: an upsert (needs id), see upsert()
     *   key:     a grouping key (a merchant or user id) the topic's per-key flow limits count
     *            by; with several shards an id given with it must be '<key>@<digits>'
     *   traceparent, tracestate: the W3C trace context to carry with the job
     *            ('00-<32 hex>-<16 hex>-<2 hex>'; tracestate up to 512 printable ASCII bytes,
     *            only with a traceparent); pop (Job::getTraceparent()), get and callbacks
     *            (as headers) carry it on
     *   delay:   seconds until the job is ready (fractions allowed; default 0)
     *   at:      absolute Unix time in seconds instead of delay
     *   ttr:     seconds a consumer has to finish it once popped (server default 60)
     *   retries: redeliveries allowed before the job is buried (default unlimited)
     *   backoff: 'stepped' or seconds to wait after each failed delivery ([15, 180, ...])
     *   url / callback: delayq POSTs the body there when the job is due, instead of pop
     *            (['url' => ..., 'timeout' => seconds]; see docs/PROTOCOL.md, Push delivery)
     */
    public function add(string $topic, $body, array $options = []): string
    {
        $fields = ['topic' => $topic, 'body' => $body] + self::addOptions($options, 'add');
        $answer = $this->call('add', $fields);
        return (string) $answer['id'];
    }

    /**
     * Upsert: replaces the job $id of $topic when it is delayed, ready or
     * buried (body, due time, ttr, retries, backoff, callback, key: an
     * option left out takes add()'s default; the trace context stays unless
     * given), or creates it (there was none, or only its kept record).
     * Returns true when it replaced a job, false when it created it. A
     * reserved job (a consumer or a callback holds it) or one of another
     * topic is a ConflictException, and nothing changes.
     *
     * @param mixed $body
     * @param array<string,mixed> $options add()'s options but id and replace
     */
    public function upsert(string $topic, string $id, $body, array $options = []): bool
    {
        $fields = ['topic' => $topic, 'body' => $body]
            + self::addOptions(['id' => $id, 'replace' => true] + $options, 'upsert');
        $answer = $this->call('add', $fields);
        return (bool) ($answer['replaced'] ?? false);
    }

    /**
     * Adds several jobs in one request (1..1000). Each job is an array with
     * 'topic', 'body' and the options of add(). If any job is invalid the
     * server refuses the whole batch (BadRequestException naming jobs[i]);
     * otherwise each job is added on its own, and the answer lists, in
     * order, ['id' => .., 'success' => true] or
     * ['id' => .., 'success' => false, 'code' => 'conflict', 'error' => ..];
     * a job sent with 'replace' => true has 'replaced' => true|false too.
     *
     * @param list<array<string,mixed>> $jobs
     * @return list<array{id:string,success:bool,replaced?:bool,code?:string,error?:string}>
     */
    public function addMany(array $jobs): array
    {
        $list = [];
        foreach (array_values($jobs) as $i => $job) {
            if (!is_array($job) || !isset($job['topic']) || !array_key_exists('body', $job)) {
                throw new \InvalidArgumentException("addMany: job $i must be an array with 'topic' and 'body'");
            }
            $rest = $job;
            unset($rest['topic'], $rest['body']);
            $list[] = ['topic' => $job['topic'], 'body' => $job['body']] + self::addOptions($rest, "addMany job $i");
        }
        $answer = $this->call('add', ['jobs' => $list]);
        return $answer['results'];
    }

    // ------------------------------------------------------------ consumers

    /**
     * Takes the next ready job of the topic(s), or returns null when there is
     * none within $timeout seconds (long-poll, 0..60; 0 answers at once). With
     * several topics (an array, or "a,b"), jobs come from the first non-empty
     * one in order. The job is reserved: finish it within its TTR.
     *
     * $finish (finish-and-pop): an id, or a list of 1..1000 ids, of jobs to
     * finish in the same request before the pop, so that a consumer loop
     * costs one request per job. The finish happens at once, before a
     * long-poll waits. $finished then receives one result per id, in
     * order, shaped as finishMany()'s: ['id' => .., 'success' => true] or
     * ['id' => .., 'success' => false, 'code' => 'not_found', 'error' => ..]
     * (not_found: the job was gone, e.g. its TTR had passed and it was
     * delivered again); without $finish (or with []) it receives []. A
     * server without finish-and-pop throws BadRequestException naming the
     * field 'finish'; an UnavailableException finished nothing, a
     * TimeoutException may have finished them or not.
     *
     * @param string|list<string> $topics
     * @param string|list<string>|null $finish
     * @param list<array{id:string,success:bool,code?:string,error?:string}>|null $finished
     */
    public function pop($topics, float $timeout = 0.0, $finish = null, ?array &$finished = null): ?Job
    {
        $fields = self::topicFields($topics);
        if ($timeout > 0) {
            $fields['timeout'] = $timeout;
        }
        $answer = $this->popCall($fields, $timeout, $finish, $finished);
        if (!isset($answer['id'])) {
            return null;
        }
        return Job::fromArray($answer);
    }

    /**
     * Takes up to $count (1..100) ready jobs, waiting up to $timeout seconds
     * for the first one; returns [] when there is none. $finish and
     * $finished: as for pop().
     *
     * @param string|list<string> $topics
     * @param string|list<string>|null $finish
     * @param list<array{id:string,success:bool,code?:string,error?:string}>|null $finished
     * @return list<Job>
     */
    public function popMany($topics, int $count, float $timeout = 0.0, $finish = null, ?array &$finished = null): array
    {
        $fields = self::topicFields($topics) + ['count' => $count];
        if ($timeout > 0) {
            $fields['timeout'] = $timeout;
        }
        $answer = $this->popCall($fields, $timeout, $finish, $finished);
        $jobs = [];
        foreach ($answer['jobs'] ?? [] as $one) {
            $jobs[] = Job::fromArray($one);
        }
        return $jobs;
    }

    /** Removes a job (done), whatever its state. Unknown id: NotFoundException. */
    public function finish(string $id): void
    {
        $this->call('finish', ['id' => $id]);
    }

    /**
     * Finishes several jobs (1..1000 ids); each is handled on its own.
     *
     * @param list<string> $ids
     * @return list<array{id:string,success:bool,code?:string,error?:string}>
     */
    public function finishMany(array $ids): array
    {
        return $this->call('finish', ['ids' => array_values($ids)])['results'];
    }

    /** Removes a job, counted as deleted (not finished). Unknown id: NotFoundException. */
    public function delete(string $id): void
    {
        $this->call('delete', ['id' => $id]);
    }

    /**
     * Deletes several jobs (1..1000 ids); each is handled on its own.
     *
     * @param list<string> $ids
     * @return list<array{id:string,success:bool,code?:string,error?:string}>
     */
    public function deleteMany(array $ids): array
    {
        return $this->call('delete', ['ids' => array_values($ids)])['results'];
    }

    /**
     * A job's state: ['id', 'topic', 'state' (delay|ready|reserved|buried),
     * 'value', 'due' (Unix ms or null), 'ttr', 'attempts', 'retries', 'created'],
     * and 'first_delivered' (Unix ms) once delivered in a topic that keeps
     * history. The kept record of a finished or deleted job (a topic's
     * policy 'keep'): ['id', 'topic', 'state' (finished|deleted), 'due',
     * 'first_delivered' (or null), 'ended', 'attempts', 'created'], no
     * 'value', 'ttr' or 'retries'; 'key' when the job had one.
     *
     * @return array<string,mixed>
     */
    public function get(string $id): array
    {
        $answer = $this->call('get', ['id' => $id]);
        unset($answer['success']);
        return $answer;
    }

    /**
     * Gives a reserved job a fresh TTR (deadline now + ttr); returns the new
     * deadline in Unix ms. Not reserved: ConflictException.
     */
    public function touch(string $id): int
    {
        return (int) $this->call('touch', ['id' => $id])['due'];
    }

    /**
     * Puts a reserved job back, ready again after $delay seconds, without
     * waiting for its TTR; returns its new state: "delay", "ready", or
     * "buried" when it has used all its retries. Not reserved: ConflictException.
     */
    public function release(string $id, float $delay = 0.0): string
    {
        return (string) $this->call('release', ['id' => $id, 'delay' => $delay])['state'];
    }

    /** Sets a reserved job aside (pop never returns it; kick brings it back). */
    public function bury(string $id): void
    {
        $this->call('bury', ['id' => $id]);
    }

    /** Makes up to $count (1..10000) buried jobs of the topic ready again; returns how many. */
    public function kick(string $topic, int $count = 1): int
    {
        return (int) $this->call('kick', ['topic' => $topic, 'count' => $count])['kicked'];
    }

    /**
     * Gives a delayed, ready or buried job a new due time: $when is
     * ['delay' => seconds from now] or ['at' => Unix seconds]. Returns
     * ['id' => .., 'state' => 'delay', 'due' => Unix ms], or 'state' =>
     * 'ready' and 'due' => null when the time is now or past. A buried job
     * gets its retries afresh. Reserved: ConflictException; unknown:
     * NotFoundException.
     *
     * @param array{delay?:float|int,at?:float|int} $when
     * @return array{id:string,state:string,due:int|null}
     */
    public function reschedule(string $id, array $when): array
    {
        if (count($when) !== 1 || array_diff(array_keys($when), ['delay', 'at'])) {
            throw new \InvalidArgumentException("reschedule needs ['delay' => seconds] or ['at' => Unix seconds] (one of them)");
        }
        $answer = $this->call('reschedule', ['id' => $id] + $when);
        unset($answer['success']);
        return $answer;
    }

    /**
     * One page of the topic's jobs in $state ('delay', 'ready', 'reserved'
     * or 'buried', or the kept records: 'finished' or 'deleted'): ['jobs' =>
     * [each as get() shows it], 'cursor' => the next page's cursor, null on
     * the last]. 'delay' and 'reserved' come by due time, 'ready' in pop
     * order, 'buried' in bury order, records newest first; $limit 1..1000
     * (server default 50).
     *
     * @return array{jobs:list<array<string,mixed>>,cursor:string|null}
     */
    public function jobs(string $topic, string $state, ?int $limit = null, ?string $cursor = null): array
    {
        $fields = ['topic' => $topic, 'state' => $state];
        if ($limit !== null) {
            $fields['limit'] = $limit;
        }
        if ($cursor !== null) {
            $fields['cursor'] = $cursor;
        }
        $answer = $this->call('jobs', $fields);
        $jobs = [];
        foreach ($answer['jobs'] ?? [] as $job) {
            unset($job['success']);
            $jobs[] = $job;
        }
        return ['jobs' => $jobs, 'cursor' => $answer['cursor'] ?? null];
    }

    /**
     * Pauses a topic: pop takes nothing from it (long-polls keep waiting)
     * and no callback of it is sent; due jobs still become ready, producers
     * are not affected. Idempotent.
     */
    public function pause(string $topic): void
    {
        $this->call('pause', ['topic' => $topic]);
    }

    /** Lets a paused topic's jobs be popped and sent again; waiting long-polls get them at once. */
    public function resume(string $topic): void
    {
        $this->call('resume', ['topic' => $topic]);
    }

    /**
     * Deletes all of the topic's jobs in $state ('delay', 'ready',
     * 'reserved' or 'buried'), or in every state when null, as delete does;
     * returns how many. The server works in short steps, so a big topic
     * holds nobody up; jobs added while it runs are kept, and schedules
     * stay. Needs a token that may delete.
     */
    public function purge(string $topic, ?string $state = null): int
    {
        $fields = ['topic' => $topic];
        if ($state !== null) {
            $fields['state'] = $state;
        }
        return (int) $this->call('purge', $fields)['purged'];
    }

    // ------------------------------------------------------------ flow control

    /**
     * Sets a topic's flow-control policy; returns it as it now stands
     * (every field, null where unset). $limits takes concurrency, rate,
     * period (seconds), key_concurrency, key_rate, key_period, keep: a
     * limit left out keeps its value, null removes it.
     *
     * @param array<string,int|float|null> $limits
     * @return array<string,int|float|null>
     */
    public function policy(string $topic, array $limits): array
    {
        $answer = $this->call('policy', ['topic' => $topic] + $limits);
        return $answer['policy'];
    }

    /**
     * The policies of one topic, or of every topic that has one (all
     * pages): [topic => [limits..., 'reserved' => n, 'throttled' => n, 'keys_waiting' => n,
     * 'tokens' => n (tokens its rate has left now), or null without a rate]].
     *
     * @return array<string,array<string,int|float|null>>
     */
    public function policies(?string $topic = null): array
    {
        if ($topic !== null) {
            return $this->call('policies', ['topic' => $topic])['policies'];
        }
        $out = [];
        $cursor = null;
        do {
            $answer = $this->call('policies', $cursor === null ? [] : ['cursor' => $cursor]);
            $out += $answer['policies'];
            $cursor = $answer['cursor'] ?? null;
        } while ($cursor !== null);
        return $out;
    }

    // ------------------------------------------------------------ periodic jobs

    /**
     * Creates or replaces the periodic job $id: each fire time T adds the job
     * "$id@T" to $topic with $body. $when is ['cron' => '0 3 * * *', 'tz' =>
     * 'Asia/Shanghai'] or ['every' => 300], plus optional 'start' and 'end'
     * (Unix seconds, a float such as microtime(true) + 60 taken to the
     * whole second below, or a DateTimeInterface); $options are add()'s ttr,
     * retries, backoff, callback, url.
     *
     * @param array<string,mixed> $when
     * @param array<string,mixed> $options
     * @return array{id:string,next:int|null,replaced:bool}
     */
    public function schedule(string $id, string $topic, $body, array $when, array $options = []): array
    {
        $unknown = array_diff(array_keys($when), ['cron', 'every', 'tz', 'start', 'end']);
        if ($unknown) {
            throw new \InvalidArgumentException('schedule: unknown timing key(s) ' . implode(', ', $unknown));
        }
        unset($options['id'], $options['delay'], $options['at']);
        foreach (['start', 'end'] as $bound) {
            if (isset($when[$bound])) {
                $when[$bound] = self::unixSeconds($when[$bound], $bound);
            }
        }
        $fields = ['id' => $id, 'topic' => $topic, 'body' => $body] + $when
            + self::addOptions($options, 'schedule');
        $answer = $this->call('schedule', $fields);
        unset($answer['success']);
        return $answer;
    }

    /**
     * Whole Unix seconds, as the server takes a schedule's start and end.
     *
     * @param mixed $when
     */
    private static function unixSeconds($when, string $field): int
    {
        if ($when instanceof \DateTimeInterface) {
            return $when->getTimestamp();
        }
        if (is_int($when) || is_float($when)) {
            return (int) floor($when);
        }
        throw new \InvalidArgumentException("schedule: '$field' must be Unix seconds or a DateTimeInterface");
    }

    /** Removes a schedule (the jobs it made stay); NotFoundException if unknown. */
    public function unschedule(string $id): void
    {
        $this->call('unschedule', ['id' => $id]);
    }

    /**
     * Every schedule, or one (with its body; with $preview its next fire
     * times in 'upcoming').
     *
     * @return list<array<string,mixed>>
     */
    public function schedules(?string $id = null, ?int $preview = null): array
    {
        $fields = array_filter(['id' => $id, 'preview' => $preview], static function ($v): bool {
            return $v !== null;
        });
        return $this->call('schedules', $fields)['schedules'];
    }

    // ------------------------------------------------------------ operations

    /**
     * Counters: ['topics' => [topic => [delay, ready, reserved, buried, added,
     * popped, finished, deleted, redelivered, buries, kicked, push_failed]],
     * 'total' => [...]],
     * for one topic or all of them.
     *
     * @return array{topics:array<string,array<string,int>>,total:array<string,int>}
     */
    public function stats(?string $topic = null): array
    {
        $answer = $this->call('stats', $topic === null ? [] : ['topic' => $topic]);
        unset($answer['success']);
        return $answer;
    }

    /**
     * GET /health: ['redis' => 'ok'] when the server and its Redis are up;
     * UnavailableException (503) when Redis is not reachable.
     *
     * @return array<string,mixed>
     */
    public function health(): array
    {
        [$status, $raw] = $this->send('GET', '/health', null, 0.0);
        $answer = $this->decode($status, $raw, 'health');
        unset($answer['success']);
        return $answer;
    }

    /** GET /metrics: the Prometheus text exposition. */
    public function metrics(): string
    {
        [$status, $raw] = $this->send('GET', '/metrics', null, 0.0);
        if ($status === 200) {
            return $raw;
        }
        $answer = json_decode($raw, true);
        throw $this->error($status, is_array($answer) ? $answer : null, $raw, 'metrics');
    }

    /**
     * Sends any command as POST /<command> with $fields as the JSON body and
     * returns the decoded answer (for commands this class does not wrap).
     * $wait: seconds the server may hold the request (a long-poll), added to
     * the client timeout.
     *
     * @param array<string,mixed> $fields
     * @return array<string,mixed>
     */
    public function call(string $command, array $fields = [], float $wait = 0.0): array
    {
        try {
            $json = json_encode((object) $fields, self::JSON_FLAGS | JSON_THROW_ON_ERROR);
        } catch (\JsonException $e) {
            throw new BadRequestException(
                "$command: the request cannot be encoded as JSON: " . $e->getMessage(),
                'bad_request',
                0,
                null,
                $e
            );
        }
        [$status, $raw] = $this->send('POST', '/' . $command, $json, max(0.0, $wait));
        return $this->decode($status, $raw, $command);
    }

    /**
     * Lets a waiting request be abandoned: while a request is in flight,
     * curl calls $abort() many times a second (and right after a signal
     * handler ran); once it returns true the request ends with a
     * ConnectionLostException whose getCurlErrno() is 42 (aborted) and the
     * connection is closed. null removes the check. The Worker uses this to
     * cut a long-poll short on SIGTERM/SIGINT; a job the server reserved
     * for that poll anyway is delivered again after its TTR.
     *
     * @param (callable():bool)|null $abort
     */
    public function setAbortCheck(?callable $abort): void
    {
        $this->abortCheck = $abort;
    }

    /**
     * curl_getinfo() of the last request (one CURLINFO_* value with
     * $option), e.g. CURLINFO_NUM_CONNECTS: 0 when it reused the connection.
     *
     * @return mixed
     */
    public function getLastInfo(?int $option = null)
    {
        if ($this->curl === null) {
            return null;
        }
        return $option === null ? curl_getinfo($this->curl) : curl_getinfo($this->curl, $option);
    }

    // ------------------------------------------------------------ internals

    /**
     * @param array<string,mixed> $options
     * @return array<string,mixed>
     */
    private static function addOptions(array $options, string $what): array
    {
        $unknown = array_diff(array_keys($options), self::ADD_OPTIONS);
        if ($unknown) {
            throw new \InvalidArgumentException("$what: unknown option(s) " . implode(', ', $unknown)
                . '; known: ' . implode(', ', self::ADD_OPTIONS));
        }
        // null means "not given"
        return array_filter($options, static function ($v): bool {
            return $v !== null;
        });
    }

    /**
     * @param string|list<string> $topics
     * @return array<string,mixed>
     */
    private static function topicFields($topics): array
    {
        if (is_array($topics)) {
            return ['topics' => array_values($topics)];
        }
        if (is_string($topics)) {
            return ['topic' => $topics];
        }
        throw new \InvalidArgumentException('topics must be a string ("a" or "a,b") or an array of strings');
    }

    /**
     * A pop with the optional 'finish' field; $finished gets the answer's
     * 'finished' list ([] when nothing was to be finished).
     *
     * @param array<string,mixed> $fields
     * @param string|list<string>|null $finish
     * @param list<array{id:string,success:bool,code?:string,error?:string}>|null $finished
     * @return array<string,mixed>
     */
    private function popCall(array $fields, float $timeout, $finish, ?array &$finished): array
    {
        $finished = [];
        if (is_array($finish)) {
            $finish = array_values($finish);
        } elseif ($finish !== null && !is_string($finish)) {
            throw new \InvalidArgumentException('finish must be a job id, a list of ids, or null');
        }
        if ($finish !== null && $finish !== []) {
            $fields['finish'] = $finish;
        }
        $answer = $this->call('pop', $fields, $timeout);
        if (isset($fields['finish'])) {
            if (!isset($answer['finished']) || !is_array($answer['finished'])) {
                throw new ServerException(
                    "the server's pop answer has no 'finished' list although 'finish' was sent",
                    'server_error',
                    200,
                    $answer
                );
            }
            $finished = $answer['finished'];
        }
        return $answer;
    }

    /** @return resource|\CurlHandle */
    private function handle()
    {
        $pid = getmypid();
        if ($this->curl === null || $this->curlPid !== $pid) {
            // A forked child must not talk on its parent's connection.
            $this->curl = curl_init();
            $this->curlPid = (int) $pid;
            if ($this->curl === false) {
                $this->curl = null;
                throw new ConnectionException('curl_init failed', 2);
            }
            $headers = ['Accept: application/json', 'Expect:'];
            if ($this->token !== null) {
                $headers[] = 'Authorization: Bearer ' . $this->token;
            }
            $this->curlHeaders = $headers;
            curl_setopt_array($this->curl, [
                CURLOPT_RETURNTRANSFER => true,
                CURLOPT_HEADER => false,
                CURLOPT_FOLLOWLOCATION => false,
                CURLOPT_NOSIGNAL => true,
                CURLOPT_HTTP_VERSION => CURL_HTTP_VERSION_1_1,
                CURLOPT_USERAGENT => $this->userAgent,
                CURLOPT_CONNECTTIMEOUT_MS => (int) ceil($this->connectTimeout * 1000),
            ]);
            if ($this->curlOptions) {
                curl_setopt_array($this->curl, $this->curlOptions);
            }
        }
        return $this->curl;
    }

    /**
     * One HTTP exchange on the kept connection.
     *
     * @return array{0:int,1:string} HTTP status and body
     */
    private function send(string $method, string $path, ?string $json, float $wait): array
    {
        $h = $this->handle();
        $headers = $this->curlHeaders;
        $opts = [
            CURLOPT_URL => $this->url . $path,
            // the long-poll wait plus the time allowed for the answer itself
            CURLOPT_TIMEOUT_MS => (int) ceil(($this->timeout + $wait) * 1000),
        ];
        if ($method === 'GET') {
            $opts[CURLOPT_HTTPGET] = true;
        } else {
            $headers[] = 'Content-Type: application/json';
            $opts[CURLOPT_POST] = true;
            $opts[CURLOPT_POSTFIELDS] = $json;
        }
        $opts[CURLOPT_HTTPHEADER] = $headers;
        $abort = $this->abortCheck;
        $opts[CURLOPT_NOPROGRESS] = $abort === null;
        // CURLOPT_PROGRESSFUNCTION rather than XFERINFOFUNCTION: PHP < 8.2 has only this one.
        $opts[CURLOPT_PROGRESSFUNCTION] = $abort === null ? null : static function () use ($abort): int {
            return $abort() ? 1 : 0;
        };
        curl_setopt_array($h, $opts);
        $raw = curl_exec($h);
        if ($raw === false) {
            $errno = curl_errno($h);
            $what = sprintf('%s %s%s: %s (curl error %d)', $method, $this->url, $path, curl_error($h), $errno);
            // A timeout before the request was written is a connect timeout.
            $notSent = in_array($errno, self::CURL_NOT_SENT, true)
                || ($errno === 28 && (int) curl_getinfo($h, CURLINFO_REQUEST_SIZE) === 0);
            // Do not reuse a connection in an unknown state.
            $this->close();
            if ($notSent) {
                throw new ConnectionException("cannot reach delayq: $what", $errno);
            }
            throw new ConnectionLostException("no answer from delayq, outcome unknown: $what", $errno);
        }
        return [(int) curl_getinfo($h, CURLINFO_RESPONSE_CODE), (string) $raw];
    }

    /**
     * The decoded success answer, or the matching exception thrown.
     *
     * @return array<string,mixed>
     */
    private function decode(int $status, string $raw, string $command): array
    {
        $answer = json_decode($raw, true);
        if ($status !== 200 || !is_array($answer) || ($answer['success'] ?? null) !== true) {
            throw $this->error($status, is_array($answer) ? $answer : null, $raw, $command);
        }
        if (!$this->assoc) {
            // Job bodies as stdClass: decode a second time without assoc and
            // take the values from there ({} and [] stay distinct).
            $objects = json_decode($raw, false);
            if (array_key_exists('value', $answer)) {
                $answer['value'] = $objects->value;
            }
            if (isset($answer['jobs']) && is_array($answer['jobs'])) {
                foreach ($answer['jobs'] as $i => $job) {
                    $answer['jobs'][$i]['value'] = $objects->jobs[$i]->value ?? null;
                }
            }
        }
        return $answer;
    }

    /**
     * @param array<string,mixed>|null $answer
     */
    private function error(int $status, ?array $answer, string $raw, string $command): DelayqException
    {
        $code = is_array($answer) && isset($answer['code']) && is_string($answer['code']) ? $answer['code'] : null;
        $class = null;
        if ($code !== null && isset(self::CODE_CLASSES[$code])) {
            $class = self::CODE_CLASSES[$code];
        } elseif (isset(self::STATUS_CLASSES[$status])) {
            $class = self::STATUS_CLASSES[$status];
        } elseif ($status >= 500 || $status < 400) {
            // 5xx, or a 2xx/3xx that is not a protocol answer (a proxy, a misconfigured URL)
            $class = ServerException::class;
        } else {
            $class = DelayqException::class;
        }
        if (is_array($answer) && isset($answer['error']) && is_string($answer['error'])) {
            $message = $answer['error'];
        } else {
            $snippet = trim(substr($raw, 0, 200));
            $message = $answer === null
                ? "$command: HTTP $status with an answer that is not JSON: " . ($snippet === '' ? '(empty)' : $snippet)
                : "$command: HTTP $status, unexpected answer: $snippet";
        }
        if ($code === null) {
            $code = self::defaultCode($class);
        }
        return new $class($message, $code, $status, $answer);
    }

    private static function defaultCode(string $class): string
    {
        $code = array_search($class, self::CODE_CLASSES, true);
        return $code === false ? ($class === ServerException::class ? 'server_error' : 'error') : (string) $code;
    }
}
