<?php

declare(strict_types=1);

namespace Delayq\Tests;

use Delayq\Client;
use PHPUnit\Framework\TestCase;

/**
 * Tests against the delayq at DELAYQ_URL (with DELAYQ_TOKEN when its auth is
 * on). Each test uses topics and ids of its own, so tests do not see each
 * other's jobs.
 */
abstract class DelayqTestCase extends TestCase
{
    /** @var Client|null */
    protected $client;

    protected static function url(): string
    {
        $url = getenv('DELAYQ_URL');
        if ($url === false || $url === '') {
            self::fail('set DELAYQ_URL to the URL of a running delayq (e.g. http://127.0.0.1:8080)');
        }
        return $url;
    }

    protected static function token(): ?string
    {
        $token = getenv('DELAYQ_TOKEN');
        return $token === false || $token === '' ? null : $token;
    }

    /** @param array<string,mixed> $options */
    protected static function newClient(array $options = []): Client
    {
        return new Client(self::url(), $options + ['token' => self::token()]);
    }

    protected function setUp(): void
    {
        $this->client = self::newClient();
    }

    protected function tearDown(): void
    {
        $this->client = null;
    }

    /** A topic or id no other test uses. */
    protected static function unique(string $what = 't'): string
    {
        static $n = 0;
        $n++;
        return sprintf('php.%s.%d.%d.%s', $what, getmypid(), $n, bin2hex(random_bytes(3)));
    }

    /** A TCP port on 127.0.0.1 where nothing listens (it was free a moment ago). */
    protected static function deadPort(): int
    {
        $server = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
        self::assertNotFalse($server, $errstr);
        $name = stream_socket_get_name($server, false);
        fclose($server);
        return (int) substr($name, strrpos($name, ':') + 1);
    }

    /**
     * Runs PHP on a script; returns [process, stdout, stderr] (pipes non-blocking).
     *
     * @param list<string> $args
     * @param array<string,string> $env added to this process' environment
     * @return array{0:resource,1:resource,2:resource}
     */
    protected static function spawnPhp(string $script, array $args, array $env = []): array
    {
        $cmd = array_merge([PHP_BINARY, $script], $args);
        $spec = [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']];
        $proc = proc_open($cmd, $spec, $pipes, null, $env ? $env + getenv() : null);
        self::assertIsResource($proc, "cannot start $script");
        stream_set_blocking($pipes[1], false);
        stream_set_blocking($pipes[2], false);
        return [$proc, $pipes[1], $pipes[2]];
    }

    /**
     * Reads the pipe until $line appears in what was read (or $timeout
     * seconds pass); returns everything read.
     *
     * @param resource $pipe
     */
    protected static function readUntil($pipe, string $line, float $timeout, string &$buffer = ''): string
    {
        $deadline = microtime(true) + $timeout;
        while (strpos($buffer, $line) === false && microtime(true) < $deadline) {
            $r = [$pipe];
            $w = $e = null;
            $left = max(0.0, $deadline - microtime(true));
            if (@stream_select($r, $w, $e, (int) $left, (int) (($left - (int) $left) * 1e6)) > 0) {
                $chunk = fread($pipe, 8192);
                if ($chunk === '' || $chunk === false) {
                    if (feof($pipe)) {
                        break;
                    }
                    continue;
                }
                $buffer .= $chunk;
            }
        }
        return $buffer;
    }

    /** Waits for a process to exit; returns its exit code, or null on timeout. */
    protected static function waitExit($proc, float $timeout): ?int
    {
        $deadline = microtime(true) + $timeout;
        do {
            $status = proc_get_status($proc);
            if (!$status['running']) {
                return $status['exitcode'];
            }
            usleep(20000);
        } while (microtime(true) < $deadline);
        return null;
    }
}
