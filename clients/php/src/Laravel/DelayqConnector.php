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
 *                                 // (or a duration: '90s', '1m', '2h')
 *         'block_for' => 5,       // seconds a pop waits for a job (long-poll), same forms
 *         'touch' => true,        // touch running jobs (needs ext-pcntl)
 *         'after_commit' => false,
 *         // each queue's delayq policy, set by `php artisan delayq:policy`
 *         'policies' => ['mail' => ['rate' => 100, 'period' => 60, 'concurrency' => 5]],
 *     ],
 */
class DelayqConnector implements ConnectorInterface
{
    private const KEYS = ['driver', 'connection', 'url', 'token', 'queue', 'ttr', 'block_for', 'touch',
        'after_commit', 'timeout', 'connect_timeout', 'policies'];

    /** @param array<string,mixed> $config */
    public function connect(array $config): DelayqQueue
    {
        if (array_key_exists('retry_after', $config)) {
            throw new \InvalidArgumentException("delayq queue connection: retry_after is the redis driver's key;"
                . " delayq's is ttr (seconds before an unfinished job is delivered again), and with touch"
                . ' a running job is kept however long it runs');
        }
        $unknown = array_diff(array_keys($config), self::KEYS);
        if ($unknown) {
            throw new \InvalidArgumentException('delayq queue connection: unknown key(s) ' . implode(', ', $unknown)
                . '; known: ' . implode(', ', self::KEYS));
        }
        $ttr = self::seconds($config, 'ttr', 60);
        $blockFor = self::seconds($config, 'block_for', 5);
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
            (bool) ($config['after_commit'] ?? false),
            self::policies($config['policies'] ?? [])
        );
    }

    /**
     * The connection's 'policies': queue => limits. Only the shape is
     * checked here; delayq checks each limit when delayq:policy sets it.
     *
     * @param mixed $policies
     * @return array<string,array<string,int|float|null>>
     */
    private static function policies($policies): array
    {
        $bad = !is_array($policies);
        foreach ($bad ? [] : $policies as $queue => $limits) {
            $bad = $bad || !is_string($queue) || !is_array($limits) || array_filter(array_keys($limits), 'is_int');
        }
        if ($bad) {
            throw new \InvalidArgumentException("delayq queue connection: policies must map each queue name to its"
                . " limits, e.g. ['mail' => ['rate' => 100, 'period' => 60, 'concurrency' => 5]]");
        }
        return $policies;
    }

    /** Seconds per duration unit; no unit is seconds. */
    private const UNITS = ['' => 1, 'ms' => 0.001, 's' => 1, 'm' => 60, 'h' => 3600];

    /**
     * $config[$key] in seconds: a number, a numeric string (env() gives
     * strings) or a duration such as '1m'. Anything else is an error, never
     * a silent cast: (float) '1m' is 1.
     *
     * @param array<string,mixed> $config
     */
    private static function seconds(array $config, string $key, float $default): float
    {
        $value = $config[$key] ?? $default;
        if (is_int($value) || is_float($value)) {
            return (float) $value;
        }
        if (is_string($value) && preg_match('/^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/', $value, $m)) {
            return (float) $m[1] * self::UNITS[$m[2] ?? ''];
        }
        throw new \InvalidArgumentException("delayq queue connection: $key must be a number of seconds or a"
            . " duration such as '90s', '1m' or '2h', not " . var_export($value, true));
    }
}
