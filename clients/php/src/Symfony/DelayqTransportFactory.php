<?php

declare(strict_types=1);

namespace Delayq\Symfony;

use Delayq\Client;
use Symfony\Component\Messenger\Transport\Serialization\SerializerInterface;
use Symfony\Component\Messenger\Transport\TransportFactoryInterface;
use Symfony\Component\Messenger\Transport\TransportInterface;

/**
 * Makes a DelayqTransport from a DSN:
 *
 *     delayq://127.0.0.1:8080?topic=orders&token=secret
 *     delayqs://queue.example.com/delayq?topic=orders      (https, a path prefix)
 *
 * Query parameters (or the transport's options, which win): topic (default
 * "messages"), token, ttr (seconds a handler has before the message is
 * delivered again, default 60; touched while the handler runs), wait
 * (seconds a get() long-polls for a message, 0..60, default 1), touch
 * (1/0, default 1: needs ext-pcntl). Port 8080 when none is given.
 */
class DelayqTransportFactory implements TransportFactoryInterface
{
    private const SCHEMES = ['delayq' => 'http', 'delayqs' => 'https'];
    private const OPTIONS = ['topic', 'token', 'ttr', 'wait', 'touch'];

    /** @param array<string,mixed> $options */
    public function createTransport(string $dsn, array $options, SerializerInterface $serializer): TransportInterface
    {
        [$url, $settings] = self::parseDsn($dsn, $options);
        $clientOptions = $settings['token'] === null ? [] : ['token' => $settings['token']];
        $factory = static function () use ($url, $clientOptions): Client {
            return new Client($url, $clientOptions);
        };
        return new DelayqTransport(
            $factory(),
            $factory,
            $serializer,
            $settings['topic'],
            $settings['ttr'],
            $settings['wait'],
            $settings['touch']
        );
    }

    /** @param array<string,mixed> $options */
    public function supports(string $dsn, array $options): bool
    {
        return (bool) preg_match('~^delayqs?://~', $dsn);
    }

    /**
     * The delayq URL and the transport's settings, checked.
     *
     * @param array<string,mixed> $options
     * @return array{0:string,1:array{topic:string,token:?string,ttr:float,wait:float,touch:bool}}
     */
    public static function parseDsn(string $dsn, array $options = []): array
    {
        $parts = parse_url($dsn);
        if ($parts === false || !isset($parts['scheme'], $parts['host']) || !isset(self::SCHEMES[$parts['scheme']])) {
            throw new \InvalidArgumentException('the delayq DSN must look like delayq://host:port?topic=name, got: '
                . preg_replace('~token=[^&]*~', 'token=...', $dsn));
        }
        $query = [];
        parse_str($parts['query'] ?? '', $query);
        unset($options['transport_name']); // added by Symfony's framework bundle
        $given = array_merge($query, $options);
        $unknown = array_diff(array_keys($given), self::OPTIONS);
        if ($unknown) {
            throw new \InvalidArgumentException('delayq transport: unknown option(s) ' . implode(', ', $unknown)
                . '; known: ' . implode(', ', self::OPTIONS));
        }
        $settings = [
            'topic' => (string) ($given['topic'] ?? 'messages'),
            'token' => isset($given['token']) && $given['token'] !== '' ? (string) $given['token'] : null,
            'ttr' => self::seconds($given, 'ttr', 60.0, 0.001, 86400.0),
            'wait' => self::seconds($given, 'wait', 1.0, 0.0, 60.0),
            'touch' => filter_var($given['touch'] ?? true, FILTER_VALIDATE_BOOLEAN, FILTER_NULL_ON_FAILURE),
        ];
        if ($settings['touch'] === null) {
            throw new \InvalidArgumentException('delayq transport: touch must be 1 or 0 (true or false)');
        }
        $url = self::SCHEMES[$parts['scheme']] . '://' . $parts['host'] . ':' . ($parts['port'] ?? 8080)
            . rtrim($parts['path'] ?? '', '/');
        return [$url, $settings];
    }

    /** @param array<string,mixed> $given */
    private static function seconds(array $given, string $name, float $default, float $min, float $max): float
    {
        if (!isset($given[$name])) {
            return $default;
        }
        $value = $given[$name];
        if (!is_numeric($value) || (float) $value < $min || (float) $value > $max) {
            throw new \InvalidArgumentException("delayq transport: $name must be a number of seconds from $min to $max");
        }
        return (float) $value;
    }
}
