<?php
// The starter app's file cache (examples/laravel), under its own prefix.

return array_replace(require __DIR__ . '/../../../../examples/laravel/config/cache.php', [
    'prefix' => 'delayq_test',
]);
