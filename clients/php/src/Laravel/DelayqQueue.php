<?php

declare(strict_types=1);

namespace Delayq\Laravel;

use Delayq\Client;
use Delayq\ConnectionLostException;
use Illuminate\Contracts\Queue\ClearableQueue;
use Illuminate\Contracts\Queue\Queue as QueueContract;
use Illuminate\Queue\Queue;

/**
 * A Laravel queue connection on delayq: a Laravel queue is a delayq topic,
 * a queued job is a delayq job whose body is Laravel's payload (the JSON
 * text, kept as a JSON string so that it comes back byte for byte).
 *
 * Jobs are added without delayq retries: Laravel counts the tries itself
 * (from delayq's attempts) and fails the job, which buries it.
 */
class DelayqQueue extends Queue implements QueueContract, ClearableQueue
{
    /** delayq takes at most this many jobs in one batch add. */
    private const BATCH_MAX = 1000;

    /** @var callable():Client */
    private $clientFactory;
    /** @var Client */
    private $client;
    /** @var string */
    private $default;
    /** @var float */
    private $ttr;
    /** @var float */
    private $blockFor;
    /** @var bool */
    private $touch;
    /** @var array<string,array<string,int|float|null>> */
    private $policies;

    /**
     * @param callable():Client $clientFactory makes a Client like $client, for
     *        the child process that touches a running job
     * @param string $default the queue (topic) when none is named
     * @param float $ttr seconds a worker has for a job before delayq delivers it again
     *        (kept longer by touching while the job runs)
     * @param float $blockFor seconds a pop waits for a job (long-poll), 0..60
     * @param bool $touch touch running jobs every TTR/3 (needs ext-pcntl)
     * @param array<string,array<string,int|float|null>> $policies queue => delayq policy
     *        limits, which `php artisan delayq:policy` sets
     */
    public function __construct(
        Client $client,
        callable $clientFactory,
        string $default,
        float $ttr,
        float $blockFor,
        bool $touch,
        bool $dispatchAfterCommit = false,
        array $policies = []
    ) {
        $this->client = $client;
        $this->clientFactory = $clientFactory;
        $this->default = $default;
        $this->ttr = $ttr;
        $this->blockFor = $blockFor;
        $this->touch = $touch;
        $this->dispatchAfterCommit = $dispatchAfterCommit;
        $this->policies = $policies;
    }

    /** @return array<string,array<string,int|float|null>> queue => delayq policy limits */
    public function getPolicies(): array
    {
        return $this->policies;
    }

    public function getClient(): Client
    {
        return $this->client;
    }

    /** @return callable():Client */
    public function getClientFactory(): callable
    {
        return $this->clientFactory;
    }

    public function touchesJobs(): bool
    {
        return $this->touch;
    }

    /**
     * Jobs not done yet: delayed, ready and reserved (buried ones have
     * failed and are not counted), as Laravel's Redis queue counts.
     *
     * @param string|null $queue
     */
    public function size($queue = null): int
    {
        $topic = $this->getQueue($queue);
        $counts = $this->getClient()->stats($topic)['topics'][$topic] ?? [];
        return (int) (($counts['delay'] ?? 0) + ($counts['ready'] ?? 0) + ($counts['reserved'] ?? 0));
    }

    /**
     * `php artisan queue:clear`: purges the jobs size() counts (delayed,
     * ready, reserved), in bounded steps whatever the queue's size; buried
     * ones stay, as Laravel's failed jobs stay when a Redis queue is
     * cleared. Returns how many went.
     *
     * @param string $queue
     */
    public function clear($queue): int
    {
        $topic = $this->getQueue($queue);
        $cleared = 0;
        foreach (['delay', 'ready', 'reserved'] as $state) {
            $cleared += $this->getClient()->purge($topic, $state);
        }
        return $cleared;
    }

    /**
     * @param object|string $job
     * @param mixed $data
     * @param string|null $queue
     * @return string the delayq job id
     */
    public function push($job, $data = '', $queue = null)
    {
        return $this->enqueueUsing(
            $job,
            $this->createPayload($job, $this->getQueue($queue), $data),
            $queue,
            null,
            function (string $payload, $queue): string {
                return $this->pushRaw($payload, $queue);
            }
        );
    }

    /**
     * @param string $payload
     * @param string|null $queue
     * @param array{delay?:\DateTimeInterface|\DateInterval|int|float} $options
     * @return string the delayq job id
     */
    public function pushRaw($payload, $queue = null, array $options = [])
    {
        $payload = (string) $payload;
        $topic = $this->getQueue($queue);
        $addOptions = $this->addOptions($options['delay'] ?? null);
        $uuid = self::uuid($payload);
        if ($uuid === null) {
            return $this->getClient()->add($topic, $payload, $addOptions);
        }
        // `queue:retry` pushes a failed job's payload again, uuid and all:
        // it replaces the buried job rather than adding a second copy
        $this->getClient()->upsert($topic, $uuid, $payload, $addOptions);
        return $uuid;
    }

    /**
     * The payload's uuid (Laravel's, kept in failed_jobs), which is the
     * delayq job id; null for a payload without one (another producer's).
     */
    private static function uuid(string $payload): ?string
    {
        $uuid = json_decode($payload, true)['uuid'] ?? null;
        return is_string($uuid) && $uuid !== '' ? $uuid : null;
    }

    /**
     * @param \DateTimeInterface|\DateInterval|int $delay
     * @param object|string $job
     * @param mixed $data
     * @param string|null $queue
     * @return string the delayq job id
     */
    public function later($delay, $job, $data = '', $queue = null)
    {
        return $this->enqueueUsing(
            $job,
            $this->createPayload($job, $this->getQueue($queue), $data),
            $queue,
            $delay,
            function (string $payload, $queue, $delay): string {
                return $this->pushRaw($payload, $queue, ['delay' => $delay]);
            }
        );
    }

    /**
     * Pushes the jobs with one batch add per 1000 jobs (delayq's batch
     * limit). A job delayq refused (say a conflict) is reported by a
     * BulkPushException once the rest were added.
     *
     * @param array<object|string> $jobs
     * @param mixed $data
     * @param string|null $queue
     */
    public function bulk($jobs, $data = '', $queue = null)
    {
        $topic = $this->getQueue($queue);
        $jobs = array_values((array) $jobs);
        $refused = [];
        foreach (array_chunk($jobs, self::BATCH_MAX) as $chunk) {
            $batch = [];
            foreach ($chunk as $job) {
                $payload = $this->createPayload($job, $topic, $data);
                $batch[] = array_filter(['topic' => $topic, 'body' => $payload, 'id' => self::uuid($payload)])
                    + $this->addOptions(null);
            }
            foreach ($this->getClient()->addMany($batch) as $i => $result) {
                if ($result['success']) {
                    $this->raiseJobQueuedEvent($result['id'], $chunk[$i]);
                } else {
                    $refused[] = $result;
                }
            }
        }
        if ($refused) {
            throw new BulkPushException($refused, count($jobs));
        }
    }

    /**
     * Takes the next job of the queue, waiting up to block_for seconds.
     *
     * @param string|null $queue
     */
    public function pop($queue = null): ?DelayqJob
    {
        $topic = $this->getQueue($queue);
        $client = $this->getClient();
        $quitting = $this->workerQuitting();
        $client->setAbortCheck($quitting);
        try {
            $job = $client->pop($topic, $this->blockFor);
        } catch (ConnectionLostException $e) {
            if ($quitting === null || !$quitting()) {
                throw $e;
            }
            $job = null; // SIGTERM cut the long-poll short; the worker stops now
        } finally {
            $client->setAbortCheck(null);
        }
        if ($job === null) {
            return null;
        }
        return new DelayqJob($this->container, $this, $job, $this->connectionName, $topic);
    }

    /**
     * Under `queue:work`: a check that turns true once Laravel's worker
     * was told to stop (SIGTERM sets its shouldQuit), so that a pop's
     * long-poll ends then rather than after block_for. Null elsewhere.
     *
     * @return (callable():bool)|null
     */
    private function workerQuitting(): ?callable
    {
        if ($this->container === null || !$this->container->resolved('queue.worker')) {
            return null;
        }
        $worker = $this->container->make('queue.worker');
        if (!property_exists($worker, 'shouldQuit')) {
            return null;
        }
        return static function () use ($worker): bool {
            return (bool) $worker->shouldQuit;
        };
    }

    /** @param string|null $queue */
    public function getQueue($queue): string
    {
        return $queue ?: $this->default;
    }

    /**
     * add() options for a job: the connection's TTR and when it is due.
     *
     * @param \DateTimeInterface|\DateInterval|int|float|null $delay
     * @return array<string,mixed>
     */
    private function addOptions($delay): array
    {
        $options = ['ttr' => $this->ttr];
        if ($delay instanceof \DateTimeInterface) {
            // an absolute time stays absolute: no drift from the request's own latency
            $options['at'] = (float) $delay->format('U.u');
        } elseif ($delay instanceof \DateInterval) {
            $options['delay'] = $this->secondsUntil($delay);
        } elseif ($delay !== null) {
            $options['delay'] = max(0.0, (float) $delay);
        }
        return $options;
    }
}
