<?php

return [
    'name' => 'delayq-laravel-test',
    'env' => 'testing',
    'debug' => true,
    'timezone' => 'UTC',
    'locale' => 'en',
    'key' => 'base64:' . base64_encode(str_repeat('k', 32)),
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
