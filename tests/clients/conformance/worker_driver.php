<?php
// The PHP client's driver for the Worker conformance suite
// (tests/clients/test_worker_conformance.py documents the protocol):
//
//     php worker_driver.php TOKEN BEHAVIOUR TOPIC URL [BEHAVIOUR TOPIC URL ...]
//
// Runs a Worker (clients/php) once per triple and prints one JSON line for
// each: behaviour, topic, run ("returned" or "raised:Type"), seconds, calls.
// PHP runs one thread: "another thread" is a signal (SIGTERM, which the
// Worker handles with ext-pcntl), sent by the process itself from the
// handler or by a child process at a later time.

declare(strict_types=1);

require __DIR__ . '/../../../clients/php/autoload.php';

use Delayq\Client;
use Delayq\Job;
use Delayq\Worker;

const CLIENT_TIMEOUT = 2.0;
const SAFETY_STOP = 15;

/** SIGTERM to this process after $seconds, from a child process. */
function sigtermLater(float $seconds): void
{
    $cmd = sprintf('sleep %.3f; kill -TERM %d', $seconds, getmypid());
    $child = proc_open(['sh', '-c', $cmd], [], $pipes);
    if ($child === false) {
        throw new RuntimeException('cannot start the stopping process');
    }
}

function raiseKind(string $kind): void
{
    switch ($kind) {
        case 'Exception':
            throw new Exception('the handler failed');
        case 'RuntimeException':
            throw new RuntimeException('the handler failed');
        case 'Error':
            throw new Error('the handler failed');
        case 'TypeError':
            $notAString = [1];
            strlen($notAString);  // a TypeError for real (strict_types)
            break;
        case 'DivisionByZeroError':
            intdiv(1, 0);
            break;
        case 'ErrorException':
            throw new ErrorException('a warning made an exception', 0, E_WARNING);
    }
    throw new LogicException("unknown kind $kind");
}

/** @return array<string,mixed> */
function runOne(string $behaviour, string $topic, string $url, ?string $token): array
{
    $out = ['behaviour' => $behaviour, 'topic' => $topic];
    if ($behaviour === 'stop-as-pop-returns' || $behaviour === 'stop-before-pop') {
        // One thread: a signal is handled between statements, where the
        // Worker checks it; and run() starts afresh (a Worker may run
        // again), so a stop before run() is not a stop of that run.
        $out['skipped'] = 'PHP has no other thread to stop the Worker at that point';
        return $out;
    }
    $client = new Client($url, ['token' => $token, 'timeout' => CLIENT_TIMEOUT]);
    $calls = 0;
    $handler = function (Job $job) use ($behaviour, &$calls): void {
        $calls++;
        $stopNow = in_array($behaviour, ['stop-in-handler', 'stop-in-handler-then-raise'], true)
            || strncmp($behaviour, 'raise:', 6) === 0;
        if ($stopNow) {
            posix_kill(getmypid(), SIGTERM);
        } elseif ($behaviour === 'stop-after-handler') {
            sigtermLater(0.3);
        }
        if ($behaviour === 'stop-in-handler-then-raise') {
            throw new RuntimeException('the handler failed');
        }
        if (strncmp($behaviour, 'raise:', 6) === 0) {
            raiseKind(substr($behaviour, 6));
        }
    };
    $worker = new Worker($client, [$topic], $handler, [
        'backoff' => [600],
        'timeout' => $behaviour === 'stop-during-poll' ? 20.0 : 2.0,
        'handle_signals' => true,
    ]);
    if ($behaviour === 'stop-during-poll') {
        sigtermLater(0.5);
    }
    pcntl_signal(SIGALRM, static function () use ($worker): void {
        $worker->stop();
    });
    pcntl_alarm(SAFETY_STOP);
    $t0 = microtime(true);
    try {
        $worker->run();
        $run = 'returned';
    } catch (Throwable $e) {
        $run = 'raised:' . get_class($e);
    }
    pcntl_alarm(0);
    return $out + ['run' => $run, 'seconds' => round(microtime(true) - $t0, 3), 'calls' => $calls];
}

pcntl_async_signals(true);
$token = $argv[1] === '-' ? null : $argv[1];
for ($i = 2; $i + 2 < $argc; $i += 3) {
    echo json_encode(runOne($argv[$i], $argv[$i + 1], $argv[$i + 2], $token)), "\n";
    // a SIGTERM sent for this run that came late is not the next one's
    usleep(50000);
}
