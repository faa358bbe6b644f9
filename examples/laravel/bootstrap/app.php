<?php
// A starter Laravel application on Debian's Laravel packages
// (php-laravel-framework) and the delayq PHP client, without Composer.
// Copy this directory anywhere; DELAYQ_PHP_CLIENT names the client's
// autoload.php when the copy is not inside a delayq checkout. What it
// writes (logs, the SQLite database, the framework's caches) goes to
// storage/, made on first use.

require '/usr/share/php/Illuminate/autoload.php';
require getenv('DELAYQ_PHP_CLIENT') ?: __DIR__ . '/../../../clients/php/autoload.php';

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'App\\', 4) === 0) {
        $file = __DIR__ . '/../app/' . str_replace('\\', '/', substr($class, 4)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

$base = dirname(__DIR__);
foreach (['framework/cache', 'logs'] as $dir) {
    if (!is_dir("$base/storage/$dir")) {
        mkdir("$base/storage/$dir", 0775, true);
    }
}
if (!is_file("$base/storage/database.sqlite")) { // failed_jobs (php artisan migrate)
    touch("$base/storage/database.sqlite");
}
// The framework's caches under storage/ too, so bootstrap/ stays as shipped.
foreach (['PACKAGES', 'SERVICES', 'CONFIG', 'ROUTES', 'EVENTS'] as $cache) {
    if (getenv("APP_{$cache}_CACHE") === false) {
        putenv("APP_{$cache}_CACHE=$base/storage/framework/cache/" . strtolower($cache) . '.php');
    }
}

$app = new Illuminate\Foundation\Application($base);
$app->singleton(Illuminate\Contracts\Console\Kernel::class, App\Console\Kernel::class);
$app->singleton(Illuminate\Contracts\Debug\ExceptionHandler::class, App\Exceptions\Handler::class);

return $app;
