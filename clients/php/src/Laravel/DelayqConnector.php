<?php

declare(strict_types=1);

namespace Delayq\Laravel;

use Delayq\Client;
use Illuminate\Queue\Connectors\ConnectorInterface;

/**
 * Makes a DelayqQueue from a config/queue.php connection:
 *
 *     'delayq' => [
 *         'driver' => 'delayq',
 *         'url' => env('DELAYQ_URL', 'http://127.0.0.1:8080'),
 *         'token' => env('DELAYQ_TOKEN'),
 *         'queue' => 'default',   // the topic when a job names no queue
 *         'ttr' => 60,            // seconds before an unfinished job is delivered again
 *         'block_for' => 5,       // seconds a pop waits for a job (long-poll)
 *         'touch' => true,        // touch running jobs (needs ext-pcntl)
 *         'after_commit' => false,
 *     ],
 */
class DelayqConnector implements ConnectorInterface
{
    private const KEYS = ['driver', 'connection', 'url', 'token', 'queue', 'ttr', 'block_for', 'touch',
        'after_commit', 'timeout', 'connect_timeout'];

    /** @param array<string,mixed> $config */
    public function connect(array $config): DelayqQueue
    {
        $unknown = array_diff(array_keys($config), self::KEYS);
        if ($unknown) {
            throw new \InvalidArgumentException('delayq queue connection: unknown key(s) ' . implode(', ', $unknown)
                . '; known: ' . implode(', ', self::KEYS));
        }
        $ttr = (float) ($config['ttr'] ?? 60);
        $blockFor = (float) ($config['block_for'] ?? 5);
        if ($ttr <= 0 || $blockFor < 0 || $blockFor > 60) {
            throw new \InvalidArgumentException('delayq queue connection: ttr must be > 0 and block_for 0..60 seconds');
        }
        $url = (string) ($config['url'] ?? Client::DEFAULT_URL);
        $options = array_filter([
            'token' => $config['token'] ?? null,
            'timeout' => $config['timeout'] ?? null,
            'connect_timeout' => $config['connect_timeout'] ?? null,
        ], static function ($v): bool {
            return $v !== null;
        });
        $factory = static function () use ($url, $options): Client {
            return new Client($url, $options);
        };
        return new DelayqQueue(
            $factory(), // made now, so that a bad URL or option fails here
            $factory,
            (string) ($config['queue'] ?? 'default'),
            $ttr,
            $blockFor,
            (bool) ($config['touch'] ?? true),
            (bool) ($config['after_commit'] ?? false)
        );
    }
}
