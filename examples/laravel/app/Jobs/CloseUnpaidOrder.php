<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/** Closes an order still unpaid when its time is up (the seeds' first use case). */
class CloseUnpaidOrder implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable;

    public $tries = 3;
    public $backoff = [10, 60];

    public function __construct(public int $order)
    {
    }

    public function handle(): void
    {
        // Here: look the order up and close it if it is still unpaid.
        file_put_contents(storage_path('logs/orders.log'), "closed order {$this->order}\n", FILE_APPEND);
    }
}
