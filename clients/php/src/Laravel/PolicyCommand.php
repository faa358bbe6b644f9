<?php

declare(strict_types=1);

namespace Delayq\Laravel;

use Illuminate\Console\Command;
use Illuminate\Contracts\Queue\Factory as QueueFactory;

/**
 * `php artisan delayq:policy [connection]`: sets each queue's delayq
 * policy as the connection's `policies` says (run it at deploy: the
 * policy lives in delayq, not in each worker). A limit a queue's entry
 * leaves out keeps its value in delayq; null removes it.
 */
class PolicyCommand extends Command
{
    /** @var string */
    protected $signature = 'delayq:policy {connection=delayq : a queue connection with driver delayq}';

    /** @var string */
    protected $description = "Set each queue's delayq policy (rate, concurrency, keep...) from the connection's 'policies'";

    public function handle(QueueFactory $queues): int
    {
        $name = (string) $this->argument('connection');
        $queue = $queues->connection($name);
        if (!$queue instanceof DelayqQueue) {
            $this->error("queue connection '$name' is not a delayq connection");
            return 1;
        }
        $policies = $queue->getPolicies();
        if (!$policies) {
            $this->warn("queue connection '$name' has no 'policies': nothing to set");
            return 0;
        }
        foreach ($policies as $topic => $limits) {
            $now = $queue->getClient()->policy($topic, $limits);
            $this->line("$topic: " . json_encode($now));
        }
        return 0;
    }
}
