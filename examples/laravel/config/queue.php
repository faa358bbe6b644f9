<?php

return [
    'default' => env('QUEUE_CONNECTION', 'delayq'),

    'connections' => [
        'delayq' => [
            'driver' => 'delayq',
            'url' => env('DELAYQ_URL', 'http://127.0.0.1:8080'),
            'token' => env('DELAYQ_TOKEN'),
            'queue' => 'orders',
            'ttr' => '1m',      // a job not finished within a minute is delivered again
            'block_for' => 5,   // queue:work's long-poll, seconds
        ],
    ],

    // Jobs that failed every try land here (php artisan queue:failed).
    'failed' => [
        'driver' => 'database-uuids',
        'database' => 'sqlite',
        'table' => 'failed_jobs',
    ],
];
