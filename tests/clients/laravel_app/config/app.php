<?php
// The starter app's settings and providers (examples/laravel), named for
// the test and fixed where the starter reads the environment.

return array_replace(require __DIR__ . '/../../../../examples/laravel/config/app.php', [
    'name' => 'delayq-laravel-test',
    'env' => 'testing',
    'debug' => true,
    'key' => 'base64:' . base64_encode(str_repeat('k', 32)),
]);
