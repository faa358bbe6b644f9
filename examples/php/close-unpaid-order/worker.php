<?php
// php worker.php
//
// The consumer: takes "close-order" jobs when they are due. An order still
// unpaid is closed and its items go back to stock; a paid one is left alone.
// Either way the job is then finished. If the store fails (an exception),
// the Worker releases the job and it is tried again after a backoff.
// Stops cleanly on Ctrl-C or SIGTERM (with ext-pcntl).

declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

use Delayq\Job;
use Delayq\Worker;

$client = delayq_client();
$store = orders();

function say(string $line): void
{
    echo date('H:i:s'), ' ', $line, "\n";
}

$worker = new Worker($client, ['close-order'], static function (Job $job) use ($store): void {
    $value = $job->getValue();
    $id = (int) ($value['order'] ?? 0);
    $what = $store->closeIfUnpaid($id);
    if ($what === 'closed') {
        say("order $id was not paid in time: closed, stock returned");
    } else {
        say("order $id: $what, nothing to do");
    }
}, [
    'timeout' => 5,
    'backoff' => [5, 30, 60, 300],
    'logger' => static function (string $level, string $message): void {
        if ($level !== 'info') {
            say("[$level] $message");
        }
    },
]);

say('waiting for close-order jobs at ' . $client->getUrl() . ' (Ctrl-C stops)');
$n = $worker->run();
say("stopped after $n job(s)");
