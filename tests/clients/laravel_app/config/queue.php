<?php
// The starter app's queue config (examples/laravel), with the delayq
// connection's settings taken from the environment each test sets.

$queue = require __DIR__ . '/../../../../examples/laravel/config/queue.php';
$queue['connections']['delayq'] = [
    'queue' => env('DELAYQ_QUEUE', 'default'),
    // as env() gives them: strings, which the connector parses ('1m')
    'ttr' => env('DELAYQ_TTR', 60),
    'block_for' => env('DELAYQ_BLOCK_FOR', 1),
    'touch' => (bool) env('DELAYQ_TOUCH', true),
    'policies' => json_decode(env('DELAYQ_POLICIES', '{}'), true),
] + array_filter(['retry_after' => env('DELAYQ_RETRY_AFTER')]) // as if copied from redis
    + $queue['connections']['delayq'];

return $queue;
