<?php
// A minimal Laravel application on Debian's Laravel packages
// (php-laravel-framework) and the delayq PHP client, without Composer.
// Its writable parts live where LARAVEL_STORAGE points (the test makes a
// temporary directory), so the source tree may stay read-only; the
// framework's caches go there too (APP_*_CACHE, set by the test).

require '/usr/share/php/Illuminate/autoload.php';
require __DIR__ . '/../../../../clients/php/autoload.php';

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'App\\', 4) === 0) {
        $file = __DIR__ . '/../app/' . str_replace('\\', '/', substr($class, 4)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

$app = new Illuminate\Foundation\Application(dirname(__DIR__));
$storage = getenv('LARAVEL_STORAGE');
if ($storage === false || $storage === '') {
    fwrite(STDERR, "LARAVEL_STORAGE must name a writable directory\n");
    exit(2);
}
$app->useStoragePath($storage);
// The failed_jobs migration is the starter app's (examples/laravel).
$app->useDatabasePath(__DIR__ . '/../../../../examples/laravel/database');

$app->singleton(Illuminate\Contracts\Console\Kernel::class, App\Console\Kernel::class);
$app->singleton(Illuminate\Contracts\Debug\ExceptionHandler::class, App\Exceptions\Handler::class);

return $app;
