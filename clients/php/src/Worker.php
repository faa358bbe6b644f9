<?php

declare(strict_types=1);

namespace Delayq;

/**
 * A consumer loop: long-polls a set of topics and hands each job to a
 * handler.
 *
 *     $worker = new Worker($client, ['close-order'], function (Job $job, Client $client): void {
 *         ...   // return normally: the job is finished
 *     });       // throw: the job is released, ready again after a backoff
 *     $worker->run();
 *
 * - The handler returns normally: the job is finished. In run(), that finish
 *   rides on the next pop (finish-and-pop: one request per job, not two);
 *   when run() returns, a finish still pending is sent on its own first. A
 *   server without finish-and-pop (a 400 naming 'finish') gets a separate
 *   finish per job instead, after one warning.
 * - The handler throws (any Throwable): the job is released with a delay
 *   taken from 'backoff' by its attempts (backoff[attempts - 1], the last
 *   entry repeating), so it is tried again later; or buried once
 *   'max_attempts' deliveries have failed. A job that has used its
 *   'retries' is buried by the server instead. One log line per outcome.
 * - The handler should not finish, delete or release the job itself. For
 *   work longer than the job's TTR it may call $client->touch($job->getId()).
 *
 * run() loops until stop() is called, 'max_jobs' jobs were handled, or (with
 * ext-pcntl) the process gets SIGTERM or SIGINT: the job in hand is finished
 * or released first; a long-poll in progress is cut short, so run() returns
 * at once (a job the server reserved for that poll anyway is delivered
 * again after its TTR). A second signal ends the process at once.
 */
final class Worker
{
    private const OPTIONS = [
        'timeout', 'backoff', 'max_attempts', 'max_jobs', 'handle_signals', 'error_pause', 'logger',
    ];

    private const CURLE_ABORTED_BY_CALLBACK = 42;

    /** @var Client */
    private $client;
    /** @var list<string> */
    private $topics;
    /** @var callable */
    private $handler;
    /** @var float */
    private $timeout;
    /** @var list<float> */
    private $backoff;
    /** @var int|null */
    private $maxAttempts;
    /** @var int|null */
    private $maxJobs;
    /** @var bool */
    private $handleSignals;
    /** @var float */
    private $errorPause;
    /** @var callable|null */
    private $logger;
    /** @var bool */
    private $stopping = false;
    /** @var int */
    private $handled = 0;
    /** @var int */
    private $handledAtRun = 0;
    /**
     * Jobs handled and not yet finished, by id, in order: their finish rides
     * on the next pop. The flag says a request that may have finished the
     * job already went out (a 504, a lost connection), so a not_found for
     * it is no news.
     *
     * @var array<string,array{0:Job,1:bool}>
     */
    private $pending = [];
    /** @var bool false once the server refused 'finish' on pop (an older server) */
    private $carry = true;

    /**
     * @param string|list<string> $topics topics in priority order (array, or "a,b")
     * @param callable $handler function (Job $job, Client $client): void
     * @param array{timeout?:float,backoff?:list<float>,max_attempts?:?int,max_jobs?:?int,handle_signals?:bool,error_pause?:float,logger?:?callable} $options
     *   timeout:        long-poll seconds of each pop, 0..60 (default 5)
     *   backoff:        release delays in seconds by attempt (default [1, 5, 30, 60, 300])
     *   max_attempts:   bury a job once this many deliveries of it have failed
     *                   (default null: release it every time; the job's own
     *                   'retries', if the producer set them, still bury it)
     *   max_jobs:       run() returns after handling this many jobs (default null: no limit)
     *   handle_signals: stop on SIGTERM/SIGINT when ext-pcntl is loaded (default true)
     *   error_pause:    seconds run() waits after a failed request to delayq (default 1)
     *   logger:         function (string $level, string $message, array $context): void;
     *                   levels "info", "warning", "error" (default: no logging)
     */
    public function __construct(Client $client, $topics, callable $handler, array $options = [])
    {
        $unknown = array_diff(array_keys($options), self::OPTIONS);
        if ($unknown) {
            throw new \InvalidArgumentException('unknown Worker option(s): ' . implode(', ', $unknown)
                . '; known: ' . implode(', ', self::OPTIONS));
        }
        if (is_string($topics)) {
            $topics = explode(',', $topics);
        }
        if (!is_array($topics) || !$topics) {
            throw new \InvalidArgumentException('Worker needs at least one topic');
        }
        $this->client = $client;
        $this->topics = array_values(array_map('strval', $topics));
        $this->handler = $handler;
        $this->timeout = (float) ($options['timeout'] ?? 5.0);
        if ($this->timeout < 0 || $this->timeout > 60) {
            throw new \InvalidArgumentException('Worker timeout must be 0..60 seconds');
        }
        $backoff = $options['backoff'] ?? [1, 5, 30, 60, 300];
        if (!is_array($backoff) || !$backoff) {
            throw new \InvalidArgumentException('Worker backoff must be a non-empty array of seconds');
        }
        $this->backoff = [];
        foreach ($backoff as $seconds) {
            if (!is_int($seconds) && !is_float($seconds) || $seconds < 0) {
                throw new \InvalidArgumentException('Worker backoff entries must be numbers of seconds >= 0');
            }
            $this->backoff[] = (float) $seconds;
        }
        $maxAttempts = $options['max_attempts'] ?? null;
        if ($maxAttempts !== null && (!is_int($maxAttempts) || $maxAttempts < 1)) {
            throw new \InvalidArgumentException('Worker max_attempts must be an integer >= 1 (or null)');
        }
        $this->maxAttempts = $maxAttempts;
        $maxJobs = $options['max_jobs'] ?? null;
        $this->maxJobs = $maxJobs === null ? null : (int) $maxJobs;
        $this->handleSignals = (bool) ($options['handle_signals'] ?? true);
        $this->errorPause = (float) ($options['error_pause'] ?? 1.0);
        $this->logger = $options['logger'] ?? null;
    }

    /**
     * Handles jobs until stop(), max_jobs, or SIGTERM/SIGINT; returns the
     * number of jobs handled by this call. A request to delayq that fails
     * (delayq or Redis down) is logged and retried after 'error_pause'
     * seconds, carrying the pending finish again; any other exception (a
     * bad token, a bad topic) ends the loop. Either way a finish still
     * pending is sent before run() returns.
     */
    public function run(): int
    {
        $this->stopping = false;
        $before = $this->handledAtRun = $this->handled;
        $restore = $this->installSignals();
        try {
            while (!$this->stopping && !$this->reachedMax()) {
                try {
                    $this->step();
                } catch (ServerException $e) {
                    $this->log('error', 'delayq request failed: {error}; retrying in {pause} s', [
                        'error' => $e->getMessage(),
                        'pause' => $this->errorPause,
                        'exception' => $e,
                    ]);
                    $this->pause($this->errorPause);
                }
            }
        } finally {
            $this->flush();
            $restore();
        }
        return $this->handled - $before;
    }

    /**
     * One pop (waiting up to 'timeout' seconds) and, if a job came, its
     * handling; a job the handler completed is finished before this returns
     * (a request of its own: finish-and-pop needs a next pop, which only
     * run() makes). Returns true when a job was handled. Request failures
     * propagate as DelayqException; handler failures do not (the job is
     * released).
     */
    public function runOnce(): bool
    {
        try {
            return $this->step();
        } finally {
            $this->flush();
        }
    }

    /**
     * Asks run() to return after the job in hand (safe to call from the
     * handler or a signal handler).
     */
    public function stop(): void
    {
        $this->stopping = true;
    }

    public function isStopping(): bool
    {
        return $this->stopping;
    }

    /** Jobs handled so far (finished or released). */
    public function getHandledCount(): int
    {
        return $this->handled;
    }

    /** The release delay, in seconds, after a failure of delivery number $attempts (1, 2, ...). */
    public function delayFor(int $attempts): float
    {
        $i = max(0, min($attempts - 1, count($this->backoff) - 1));
        return $this->backoff[$i];
    }

    /**
     * One pop, carrying the pending finishes, and the handling of the job
     * it brought; a completed job's finish is left pending.
     */
    private function step(): bool
    {
        if ($this->stopping) {
            return false;
        }
        $carried = $this->carry ? array_map('strval', array_slice(array_keys($this->pending), 0, 1000)) : [];
        $finished = [];
        $refused = null;
        // stop() (from a signal handler) abandons the long-poll: curl asks
        // the check many times a second and right after a signal.
        $this->client->setAbortCheck(function (): bool {
            return $this->stopping;
        });
        try {
            $job = $this->client->pop($this->topics, $this->timeout, $carried ?: null, $finished);
        } catch (ConnectionLostException $e) {
            $this->maybeFinished($carried);  // sent: the outcome is unknown
            if ($this->stopping && $e->getCurlErrno() === self::CURLE_ABORTED_BY_CALLBACK) {
                return false;
            }
            throw $e;
        } catch (UnavailableException $e) {
            throw $e;  // nothing was done: carried again as it is
        } catch (ServerException $e) {
            $this->maybeFinished($carried);  // a 504: unknown
            throw $e;
        } catch (BadRequestException $e) {
            if (!$carried || strpos($e->getMessage(), "'finish'") === false) {
                throw $e;
            }
            $refused = $e;
            $job = null;
        } finally {
            $this->client->setAbortCheck(null);
        }
        if ($refused !== null) {
            $this->log('warning', 'the server does not take finish on pop ({reason}); finishing each '
                . 'job with a request of its own', ['reason' => $refused->getMessage(), 'exception' => $refused]);
            $this->carry = false;
            $this->flush();
            return false;
        }
        $this->settle($carried, $finished);
        if ($job === null) {
            return false;
        }
        $this->handle($job, $this->carry);
        return true;
    }

    private function handle(Job $job, bool $carry): void
    {
        $this->handled++;
        try {
            ($this->handler)($job, $this->client);
        } catch (\Throwable $e) {
            $this->failed($job, $e, self::context($job));
            return;
        }
        if ($carry) {
            $this->pending[$job->getId()] = [$job, false];
        } else {
            $this->finish($job, false);
        }
    }

    /** @param list<string> $ids */
    private function maybeFinished(array $ids): void
    {
        foreach ($ids as $id) {
            $this->pending[$id][1] = true;
        }
    }

    /**
     * Takes the 'finished' outcomes of a pop that carried $carried.
     *
     * @param list<string> $carried
     * @param list<array{id:string,success:bool,code?:string,error?:string}> $finished
     */
    private function settle(array $carried, array $finished): void
    {
        $outcome = [];
        foreach ($finished as $r) {
            $outcome[(string) ($r['id'] ?? '')] = $r;
        }
        foreach ($carried as $id) {
            [$job, $maybeDone] = $this->pending[$id];
            $context = self::context($job);
            $r = $outcome[$id] ?? null;
            $code = $r === null ? null : ($r['code'] ?? null);
            if ($code === 'unavailable' || $code === 'timeout') {
                // That id's shard failed (several shards): carried again.
                $this->pending[$id][1] = $maybeDone || $code === 'timeout';
                $this->log('warning', 'finishing job {id} failed: {reason}; trying again with the next pop',
                    $context + ['reason' => ($r['error'] ?? '?') . " ($code)"]);
                continue;
            }
            unset($this->pending[$id]);
            if ($r === null) {
                $this->log('error', 'the server did not say whether job {id} was finished; it will be '
                    . 'delivered again after its TTR if it was not', $context);
            } elseif (($r['success'] ?? false) === true) {
                $this->log('info', 'job {id} finished (attempt {attempts})', $context);
            } elseif ($code === 'not_found') {
                $this->gone($context, $maybeDone);
            } else {
                $this->log('error', 'finishing job {id} failed: {reason}; it will be delivered again after '
                    . 'its TTR', $context + ['reason' => ($r['error'] ?? '?') . ' (' . ($code ?? '?') . ')']);
            }
        }
    }

    /** Sends the pending finishes, each with a request of its own. */
    private function flush(): void
    {
        foreach ($this->pending as $id => [$job, $maybeDone]) {
            unset($this->pending[$id]);
            try {
                $this->finish($job, $maybeDone);
            } catch (DelayqException $e) {
                $this->log('error', 'finishing job {id} failed: {reason}; it will be delivered again after '
                    . 'its TTR', self::context($job) + ['reason' => $e->getMessage(), 'exception' => $e]);
            }
        }
    }

    private function finish(Job $job, bool $maybeDone): void
    {
        $context = self::context($job);
        try {
            $this->client->finish($job->getId());
            $this->log('info', 'job {id} finished (attempt {attempts})', $context);
        } catch (NotFoundException $gone) {
            $this->gone($context, $maybeDone);
        } catch (ServerException $e) {
            $this->log('error', 'finishing job {id} failed: {reason}; it will be delivered again after '
                . 'its TTR', $context + ['reason' => $e->getMessage(), 'exception' => $e]);
        }
    }

    /** @param array<string,mixed> $context */
    private function gone(array $context, bool $maybeDone): void
    {
        if ($maybeDone) {
            $this->log('info', 'job {id} was finished already (by a request whose answer was lost)', $context);
            return;
        }
        $this->log('warning', 'job {id} was gone before it could be finished (deleted, or its TTR '
            . 'of {ttr} s had passed and another delivery finished it)', $context);
    }

    /** @return array<string,mixed> */
    private static function context(Job $job): array
    {
        return [
            'id' => $job->getId(),
            'topic' => $job->getTopic(),
            'attempts' => $job->getAttempts(),
            'ttr' => $job->getTtr(),
        ];
    }

    /**
     * A handler failure: releases the job for its backoff step, or buries it
     * once 'max_attempts' deliveries have failed; logs exactly one line
     * saying which (the same sentences as the Python Worker's).
     *
     * @param array<string,mixed> $context
     */
    private function failed(Job $job, \Throwable $e, array $context): void
    {
        $context += ['error' => get_class($e) . ': ' . $e->getMessage(), 'exception' => $e];
        try {
            if ($this->maxAttempts !== null && $job->getAttempts() >= $this->maxAttempts) {
                $this->client->bury($job->getId());
                $this->log('error', 'job {id} failed on attempt {attempts} ({error}); buried after '
                    . '{attempts} attempts', $context);
                return;
            }
            $delay = $this->delayFor($job->getAttempts());
            $state = $this->client->release($job->getId(), $delay);
            if ($state === 'buried') {
                $this->log('error', 'job {id} failed on attempt {attempts} ({error}); buried: its '
                    . 'retries are used up', $context);
            } else {
                $this->log('warning', 'job {id} failed on attempt {attempts} ({error}); retry in '
                    . '{delay} s', $context + ['delay' => $delay]);
            }
        } catch (ConflictException | NotFoundException $gone) {
            // Its TTR passed (it is someone else's now) or it was removed.
            $this->log('warning', 'job {id} failed on attempt {attempts} ({error}) and was no longer '
                . 'reserved (its TTR of {ttr} s passed, or it was deleted)', $context);
        } catch (ServerException $down) {
            $this->log('error', 'job {id} failed on attempt {attempts} ({error}); giving it back failed '
                . 'too ({reason}): it will be delivered again after its TTR', $context + [
                    'reason' => $down->getMessage(),
                ]);
        }
    }

    private function reachedMax(): bool
    {
        return $this->maxJobs !== null && $this->handled - $this->handledAtRun >= $this->maxJobs;
    }

    /** Sleeps, waking early when stop() is called. */
    private function pause(float $seconds): void
    {
        $until = microtime(true) + $seconds;
        while (!$this->stopping && ($left = $until - microtime(true)) > 0) {
            usleep((int) (min($left, 0.1) * 1e6));
        }
    }

    /**
     * Installs SIGTERM/SIGINT handlers when asked and possible; returns the
     * function that puts the previous ones back.
     */
    private function installSignals(): callable
    {
        if (!$this->handleSignals || !function_exists('pcntl_async_signals') || !function_exists('pcntl_signal')) {
            return static function (): void {
            };
        }
        $wasAsync = pcntl_async_signals(true);
        $previous = [];
        foreach ([SIGTERM, SIGINT] as $signo) {
            $previous[$signo] = pcntl_signal_get_handler($signo);
            pcntl_signal($signo, function (int $signo): void {
                $this->log('info', 'signal {signal}: stopping after the job in hand', ['signal' => $signo]);
                $this->stop();
                // A second signal acts as if no handler were installed.
                pcntl_signal($signo, SIG_DFL);
            });
        }
        return static function () use ($wasAsync, $previous): void {
            foreach ($previous as $signo => $handler) {
                pcntl_signal($signo, $handler);
            }
            pcntl_async_signals($wasAsync);
        };
    }

    /**
     * @param array<string,mixed> $context
     */
    private function log(string $level, string $message, array $context = []): void
    {
        if ($this->logger === null) {
            return;
        }
        $text = preg_replace_callback('/\{(\w+)\}/', static function (array $m) use ($context): string {
            $v = $context[$m[1]] ?? null;
            return is_scalar($v) ? (string) $v : $m[0];
        }, $message);
        ($this->logger)($level, (string) $text, $context);
    }
}
