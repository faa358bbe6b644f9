<?php

declare(strict_types=1);

namespace Delayq\Laravel;

use Illuminate\Queue\QueueManager;
use Illuminate\Support\ServiceProvider;

/**
 * Registers the 'delayq' queue driver (config/queue.php: 'driver' => 'delayq').
 * Discovered by Laravel from the client's composer.json, or listed in
 * config/app.php's 'providers'.
 */
class DelayqServiceProvider extends ServiceProvider
{
    public function boot(): void
    {
        if ($this->app->runningInConsole()) {
            $this->commands([PolicyCommand::class]);
        }
        $this->app->afterResolving('queue', static function (QueueManager $manager): void {
            self::addDriver($manager);
        });
        if ($this->app->resolved('queue')) {
            self::addDriver($this->app->make('queue'));
        }
    }

    private static function addDriver(QueueManager $manager): void
    {
        $manager->addConnector('delayq', static function (): DelayqConnector {
            return new DelayqConnector();
        });
    }
}
