<?php

declare(strict_types=1);

namespace Delayq;

/**
 * Keeps a reserved job reserved while a long handler runs: a forked child
 * process touches the job every third of its TTR until stop() is called,
 * so the job is not delivered again while it is still being worked on.
 *
 * PHP has no threads and only one alarm (which framework workers use for
 * their own timeouts), so the touching happens in a child process. The
 * child shares nothing with the handler: it talks to delayq on a Client of
 * its own, made by the factory after the fork, and it ends with SIGKILL so
 * that no destructor or shutdown function of the parent's objects runs in
 * it (a destructor could close a database connection the parent still
 * uses). It also ends when the parent dies (a worker killed for a timeout):
 * it waits on a socket pair whose other end only the parent holds, and
 * sees end-of-file then; the job is then delivered again after its TTR, as
 * for any consumer that died.
 *
 * Needs ext-pcntl and ext-posix; without them available() is false and
 * start() returns null (no touching: a handler must finish within the TTR
 * or touch the job itself).
 */
final class Heartbeat
{
    /** Touches at most this often, whatever the TTR. */
    private const MIN_INTERVAL = 0.05;

    /** @var int */
    private $pid;
    /** @var resource */
    private $socket;

    /** @param resource $socket */
    private function __construct(int $pid, $socket)
    {
        $this->pid = $pid;
        $this->socket = $socket;
    }

    public static function available(): bool
    {
        return function_exists('pcntl_fork') && function_exists('posix_kill') && function_exists('stream_socket_pair');
    }

    /**
     * Starts touching job $id (reserved, TTR $ttr seconds) from a child
     * process; returns null when that cannot be done here.
     *
     * @param callable():Client $clientFactory makes the child's own Client
     */
    public static function start(callable $clientFactory, string $id, float $ttr): ?self
    {
        if (!self::available()) {
            return null;
        }
        $pair = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
        if ($pair === false) {
            return null;
        }
        $pid = pcntl_fork();
        if ($pid < 0) {
            fclose($pair[0]);
            fclose($pair[1]);
            return null;
        }
        if ($pid === 0) {
            fclose($pair[0]);
            self::runChild($clientFactory, $id, $ttr, $pair[1]);
        }
        fclose($pair[1]);
        return new self($pid, $pair[0]);
    }

    /** Stops the touching (idempotent). */
    public function stop(): void
    {
        if ($this->pid <= 0) {
            return;
        }
        posix_kill($this->pid, SIGKILL);
        pcntl_waitpid($this->pid, $status);
        fclose($this->socket);
        $this->pid = 0;
    }

    public function __destruct()
    {
        $this->stop();
    }

    /**
     * The child: touch every $ttr/3 seconds until the parent's end of the
     * socket closes or the job is no longer reserved; never returns.
     *
     * @param resource $socket
     * @return never
     */
    private static function runChild(callable $clientFactory, string $id, float $ttr, $socket): void
    {
        // The framework's signal handlers belong to the parent's loop.
        foreach ([SIGTERM, SIGINT, SIGQUIT, SIGALRM, SIGUSR2, SIGCONT] as $signal) {
            pcntl_signal($signal, SIG_DFL);
        }
        $interval = max(self::MIN_INTERVAL, $ttr / 3);
        $seconds = (int) floor($interval);
        $micros = (int) (($interval - $seconds) * 1e6);
        try {
            $client = $clientFactory();
            while (true) {
                $read = [$socket];
                $none = null;
                $ready = @stream_select($read, $none, $none, $seconds, $micros);
                if ($ready === false || $ready > 0) {
                    break; // the parent closed its end or died
                }
                try {
                    $client->touch($id);
                } catch (NotFoundException | ConflictException $e) {
                    break; // finished, released or taken from us: nothing left to keep
                } catch (DelayqException $e) {
                    // a lost connection or an unavailable Redis: try again next time
                }
            }
        } finally {
            posix_kill(posix_getpid(), SIGKILL);
        }
    }
}
