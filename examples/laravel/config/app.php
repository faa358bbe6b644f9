<?php

return [
    'name' => 'delayq-starter',
    'env' => env('APP_ENV', 'local'),
    'debug' => (bool) env('APP_DEBUG', true),
    'timezone' => 'UTC',
    'locale' => 'en',
    // Set your own (php artisan key:generate --show) before anything real.
    'key' => env('APP_KEY', 'base64:' . base64_encode(str_repeat('s', 32))),
    'cipher' => 'AES-256-CBC',
    'providers' => [
        Illuminate\Bus\BusServiceProvider::class,
        Illuminate\Cache\CacheServiceProvider::class,
        Illuminate\Foundation\Providers\ConsoleSupportServiceProvider::class,
        Illuminate\Database\DatabaseServiceProvider::class,
        Illuminate\Filesystem\FilesystemServiceProvider::class,
        Illuminate\Queue\QueueServiceProvider::class,
        Illuminate\Encryption\EncryptionServiceProvider::class,
        Delayq\Laravel\DelayqServiceProvider::class,
    ],
];
