<?php

return [
    'default' => env('QUEUE_CONNECTION', 'delayq'),

    'connections' => [
        'delayq' => [
            'driver' => 'delayq',
            'url' => env('DELAYQ_URL', 'http://127.0.0.1:8080'),
            'token' => env('DELAYQ_TOKEN'),
            'queue' => env('DELAYQ_QUEUE', 'default'),
            // as env() gives them: strings, which the connector parses ('1m')
            'ttr' => env('DELAYQ_TTR', 60),
            'block_for' => env('DELAYQ_BLOCK_FOR', 1),
            'touch' => (bool) env('DELAYQ_TOUCH', true),
            'policies' => json_decode(env('DELAYQ_POLICIES', '{}'), true),
        ] + array_filter(['retry_after' => env('DELAYQ_RETRY_AFTER')]), // as if copied from redis
    ],

    'failed' => [
        'driver' => 'database-uuids',
        'database' => 'sqlite',
        'table' => 'failed_jobs',
    ],
];
