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
 * - The handler returns normally: the job is finished.
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
     * seconds; any other exception (a bad token, a bad topic) ends the loop.
     */
    public function run(): int
    {
        $this->stopping = false;
        $before = $this->handledAtRun = $this->handled;
        $restore = $this->installSignals();
        try {
            while (!$this->stopping && !$this->reachedMax()) {
                try {
                    $this->runOnce();
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
            $restore();
        }
        return $this->handled - $before;
    }

    /**
     * One pop (waiting up to 'timeout' seconds) and, if a job came, its
     * handling. Returns true when a job was handled. Request failures
     * propagate as DelayqException; handler failures do not (the job is
     * released).
     */
    public function runOnce(): bool
    {
        if ($this->stopping) {
            return false;
        }
        // stop() (from a signal handler) abandons the long-poll: curl asks
        // the check many times a second and right after a signal.
        $this->client->setAbortCheck(function (): bool {
            return $this->stopping;
        });
        try {
            $job = $this->client->pop($this->topics, $this->timeout);
        } catch (ConnectionLostException $e) {
            if ($this->stopping && $e->getCurlErrno() === self::CURLE_ABORTED_BY_CALLBACK) {
                return false;
            }
            throw $e;
        } finally {
            $this->client->setAbortCheck(null);
        }
        if ($job === null) {
            return false;
        }
        $this->handle($job);
        return true;
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

    private function handle(Job $job): void
    {
        $this->handled++;
        $context = [
            'id' => $job->getId(),
            'topic' => $job->getTopic(),
            'attempts' => $job->getAttempts(),
            'ttr' => $job->getTtr(),
        ];
        try {
            ($this->handler)($job, $this->client);
        } catch (\Throwable $e) {
            $this->failed($job, $e, $context);
            return;
        }
        try {
            $this->client->finish($job->getId());
            $this->log('info', 'job {id} finished (attempt {attempts})', $context);
        } catch (NotFoundException $gone) {
            $this->log('warning', 'job {id} was gone before it could be finished (deleted, or its TTR '
                . 'of {ttr} s had passed and another delivery finished it)', $context);
        } catch (ServerException $e) {
            $this->log('error', 'finishing job {id} failed: {reason}; it will be delivered again after '
                . 'its TTR', $context + ['reason' => $e->getMessage(), 'exception' => $e]);
        }
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
