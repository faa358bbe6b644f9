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

    /** @var resource|null the fake server (php -S), shared by every test of the run */
    private static $fake;
    /** @var string */
    private static $fakeUrl = '';

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
     * The URL of a stand-in delayq for answers the real one cannot be made
     * to give on demand: php -S with tests/fixtures/fake_server.php (its
     * routes are described there). Started on first use, stopped when the
     * run ends.
     */
    protected static function fakeServerUrl(): string
    {
        if (self::$fake !== null) {
            return self::$fakeUrl;
        }
        $port = self::deadPort();
        $cmd = [PHP_BINARY, '-S', "127.0.0.1:$port", __DIR__ . '/fixtures/fake_server.php'];
        $spec = [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']];
        // One process (no PHP_CLI_SERVER_WORKERS): proc_terminate() ends it all.
        $proc = proc_open($cmd, $spec, $pipes);
        self::assertIsResource($proc, 'cannot start php -S');
        self::$fake = $proc;
        self::$fakeUrl = "http://127.0.0.1:$port";
        register_shutdown_function(static function (): void {
            if (self::$fake !== null) {
                proc_terminate(self::$fake);
                proc_close(self::$fake);
                self::$fake = null;
            }
        });
        $deadline = microtime(true) + 10;
        while (microtime(true) < $deadline) {
            $s = @stream_socket_client("tcp://127.0.0.1:$port", $errno, $errstr, 0.2);
            if ($s) {
                fclose($s);
                return self::$fakeUrl;
            }
            usleep(20000);
        }
        self::fail("php -S did not start on port $port");
    }

    /**
     * A script for the fake server's /seq route: $answers maps a command to
     * the answers its requests get in turn ([HTTP status, body text]);
     * returns the base URL to give a Client. seqRequests() reads back what
     * was sent.
     *
     * @param array<string,list<array{0:int,1:string}>> $answers
     */
    protected static function fakeSequence(array $answers): string
    {
        $name = 'delayq-php-seq-' . bin2hex(random_bytes(6));
        $dir = sys_get_temp_dir() . '/' . $name;
        self::assertTrue(mkdir($dir, 0700), "cannot make $dir");
        file_put_contents("$dir/answers.json", json_encode((object) $answers));
        register_shutdown_function(static function () use ($dir): void {
            foreach ((array) glob("$dir/*") as $f) {
                @unlink((string) $f);
            }
            @rmdir($dir);
        });
        return self::fakeServerUrl() . "/seq/$name";
    }

    /**
     * The requests a /seq URL got, in order: [command, decoded body].
     *
     * @return list<array{0:string,1:mixed}>
     */
    protected static function seqRequests(string $url): array
    {
        $dir = sys_get_temp_dir() . '/' . basename($url);
        $out = [];
        foreach (file("$dir/requests.jsonl", FILE_IGNORE_NEW_LINES) ?: [] as $line) {
            $r = json_decode($line, true);
            $out[] = [$r['command'], json_decode($r['body'], true)];
        }
        return $out;
    }

    /**
     * Sends one command to the Redis of the delayq under test
     * (DELAYQ_TEST_REDIS=host:port, which tests/clients/test_php_client.py
     * sets); skips the test without it. Returns the reply's first line.
     */
    protected static function redis(string ...$args): string
    {
        $addr = getenv('DELAYQ_TEST_REDIS');
        if ($addr === false || $addr === '') {
            self::markTestSkipped('DELAYQ_TEST_REDIS (host:port of the Redis of the delayq under test) is not set');
        }
        $s = stream_socket_client("tcp://$addr", $errno, $errstr, 2);
        self::assertNotFalse($s, "redis at $addr: $errstr");
        $cmd = '*' . count($args) . "\r\n";
        foreach ($args as $a) {
            $cmd .= '$' . strlen($a) . "\r\n$a\r\n";
        }
        fwrite($s, $cmd);
        $line = (string) fgets($s);
        fclose($s);
        return rtrim($line);
    }

    /**
     * delayq_requests_total of the delayq under test (one delayq-fcgi), by
     * "command/code".
     *
     * @return array<string,int>
     */
    protected function requestCounts(): array
    {
        preg_match_all('/^delayq_requests_total\{command="([^"]*)",code="([^"]*)"\} ([0-9.e+]+)$/m',
            $this->client->metrics(), $m, PREG_SET_ORDER);
        $counts = [];
        foreach ($m as [, $command, $code, $n]) {
            $counts["$command/$code"] = ($counts["$command/$code"] ?? 0) + (int) $n;
        }
        return $counts;
    }

    /**
     * How many $command requests (with $code, or any) were answered between
     * two requestCounts().
     *
     * @param array<string,int> $before
     * @param array<string,int> $after
     */
    protected static function requestsBetween(array $before, array $after, string $command, ?string $code = null): int
    {
        $n = 0;
        foreach ($after as $key => $count) {
            [$c, $k] = explode('/', $key, 2);
            if ($c === $command && ($code === null || $k === $code)) {
                $n += $count - ($before[$key] ?? 0);
            }
        }
        return $n;
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
