<?php
// Commands the test drives the delayq queue connection with.

use App\Jobs\RecordJob;
use Illuminate\Support\Carbon;
use Illuminate\Support\Facades\Artisan;
use Illuminate\Support\Facades\Queue;

Artisan::command('delayq:push {name} {--behaviour=ok} {--queue=} {--delay=} {--at=}', function (string $name) {
    $job = new RecordJob($name, (string) $this->option('behaviour'));
    $queue = $this->option('queue') ?: null;
    $delayq = Queue::connection('delayq');
    if ($this->option('delay') !== null) {
        $id = $delayq->later((int) $this->option('delay'), $job, '', $queue);
    } elseif ($this->option('at') !== null) {
        $id = $delayq->later(Carbon::createFromTimestamp((float) $this->option('at')), $job, '', $queue);
    } else {
        $id = $delayq->push($job, '', $queue);
    }
    $this->line($id);
})->purpose('Push a RecordJob on the delayq connection; prints the delayq job id');

Artisan::command('delayq:bulk {count} {--queue=}', function (string $count) {
    $jobs = [];
    for ($i = 0; $i < (int) $count; $i++) {
        $jobs[] = new RecordJob("bulk-$i");
    }
    Queue::connection('delayq')->bulk($jobs, '', $this->option('queue') ?: null);
})->purpose('Push COUNT RecordJobs with one bulk call');

Artisan::command('delayq:size {--queue=}', function () {
    $this->line((string) Queue::connection('delayq')->size($this->option('queue') ?: null));
})->purpose('Print the size of a delayq queue');
