<?php
// php artisan order:place 42 [--close-after=1800]: an order is placed, and
// closed after the delay unless paid (here: always closed).

use App\Jobs\CloseUnpaidOrder;
use Illuminate\Support\Facades\Artisan;

Artisan::command('order:place {order} {--close-after=1800}', function (string $order) {
    $after = (int) $this->option('close-after');
    CloseUnpaidOrder::dispatch((int) $order)->delay($after);
    $this->info("order $order placed; closed in $after s unless paid");
})->purpose('Place an order: a CloseUnpaidOrder job, delayed');
