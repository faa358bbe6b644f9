<?php

declare(strict_types=1);

namespace Delayq\Laravel;

use Delayq\Heartbeat;
use Delayq\Job;
use Delayq\NotFoundException;
use Illuminate\Container\Container;
use Illuminate\Contracts\Queue\Job as JobContract;
use Illuminate\Queue\Jobs\Job as LaravelJob;

/**
 * A delayq job being worked on by a Laravel worker. delete() finishes it,
 * release($delay) releases it with that delay, attempts() is delayq's
 * attempts (this delivery included), and fail() buries it: Laravel's
 * failed-job handling records it, and it stays in delayq, buried, where
 * `kick` can run it again (or `delete` drop it).
 *
 * While the job runs, a Heartbeat touches it every TTR/3, so a job may run
 * as long as the worker's --timeout allows; when the worker is killed for
 * the timeout, the touching stops and delayq delivers the job again after
 * its TTR.
 */
class DelayqJob extends LaravelJob implements JobContract
{
    /** @var DelayqQueue */
    private $delayq;
    /** @var Job */
    private $job;

    public function __construct(Container $container, DelayqQueue $delayq, Job $job, ?string $connectionName, string $queue)
    {
        $this->container = $container;
        $this->delayq = $delayq;
        $this->job = $job;
        $this->connectionName = $connectionName;
        $this->queue = $queue;
    }

    public function fire()
    {
        $heartbeat = $this->delayq->touchesJobs()
            ? Heartbeat::start($this->delayq->getClientFactory(), $this->job->getId(), $this->job->getTtr())
            : null;
        try {
            parent::fire();
        } finally {
            if ($heartbeat !== null) {
                $heartbeat->stop();
            }
        }
    }

    /**
     * Finishes the job, or buries it when it failed (fail() marks the job
     * failed, then deletes it). A job already gone (finished by hand, or
     * delivered again after its TTR and done elsewhere) leaves nothing to do.
     */
    public function delete()
    {
        parent::delete();
        try {
            if ($this->hasFailed()) {
                $this->delayq->getClient()->bury($this->job->getId());
            } else {
                $this->delayq->getClient()->finish($this->job->getId());
            }
        } catch (NotFoundException $e) {
            return;
        }
    }

    /** @param int $delay seconds before the job is ready again */
    public function release($delay = 0)
    {
        parent::release($delay);
        $this->delayq->getClient()->release($this->job->getId(), max(0.0, (float) $delay));
    }

    /** Gives the job a fresh TTR by hand (without ext-pcntl nothing does it for you). */
    public function touch(): void
    {
        $this->delayq->getClient()->touch($this->job->getId());
    }

    public function attempts()
    {
        return $this->job->getAttempts();
    }

    public function getJobId()
    {
        return $this->job->getId();
    }

    public function getRawBody()
    {
        $value = $this->job->getValue();
        // A job added by another producer with a JSON object body, not a string.
        return is_string($value) ? $value : (string) json_encode($value, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
    }

    public function getDelayqJob(): Job
    {
        return $this->job;
    }
}
