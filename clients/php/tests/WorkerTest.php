<?php

declare(strict_types=1);

namespace Delayq\Tests;

use Delayq\Client;
use Delayq\Job;
use Delayq\NotFoundException;
use Delayq\UnauthorizedException;
use Delayq\Worker;

final class WorkerTest extends DelayqTestCase
{
    /** @var list<array{0:string,1:string}> */
    private $logged = [];

    private function logger(): callable
    {
        return function (string $level, string $message): void {
            $this->logged[] = [$level, $message];
        };
    }

    public function testSuccessFinishesJobs(): void
    {
        $topic = self::unique('w');
        $other = self::unique('w');
        $a = $this->client->add($topic, ['n' => 1]);
        $b = $this->client->add($other, 'two');
        $seen = [];
        $worker = new Worker($this->client, [$topic, $other], function (Job $job, Client $client) use (&$seen): void {
            $seen[] = [$job->getId(), $job->getValue(), $job->getAttempts()];
            $this->assertSame('reserved', $client->get($job->getId())['state']);
        }, ['timeout' => 1, 'max_jobs' => 2, 'logger' => $this->logger()]);
        $this->assertSame(2, $worker->run());
        $this->assertSame([[$a, ['n' => 1], 1], [$b, 'two', 1]], $seen);
        foreach ([$topic, $other] as $t) {
            $stats = $this->client->stats($t)['topics'][$t];
            $this->assertSame(1, $stats['finished'], $t);
            $this->assertSame(0, $stats['reserved'] + $stats['ready'] + $stats['delay'], $t);
        }
        $this->assertContains(['info', "job $a finished (attempt 1)"], $this->logged);
        $this->assertSame(2, $worker->getHandledCount());
    }

    public function testFailureReleasesWithBackoffThenSucceeds(): void
    {
        $topic = self::unique('w');
        $id = $this->client->add($topic, 'flaky');
        $attempts = [];
        $worker = new Worker($this->client, $topic, function (Job $job) use (&$attempts): void {
            $attempts[] = [$job->getAttempts(), microtime(true)];
            if ($job->getAttempts() < 3) {
                throw new \RuntimeException('payment service down');
            }
        }, ['timeout' => 3, 'backoff' => [0.2, 0.5], 'logger' => $this->logger()]);

        $this->assertTrue($worker->runOnce());
        $info = $this->client->get($id);
        $this->assertSame('delay', $info['state'], 'not released after a failure');
        $this->assertEqualsWithDelta(microtime(true) * 1000 + 200, $info['due'], 150);
        $this->assertSame(
            [['warning', "job $id failed on attempt 1 (RuntimeException: payment service down); retry in 0.2 s"]],
            $this->logged
        );

        $this->assertTrue($worker->runOnce());  // waits for the backoff, fails again
        $this->assertSame('delay', $this->client->get($id)['state']);
        $this->assertTrue($worker->runOnce());  // third attempt succeeds
        $this->assertSame([1, 2, 3], array_column($attempts, 0));
        $this->assertGreaterThanOrEqual(0.15, $attempts[1][1] - $attempts[0][1], 'retried before its backoff');
        $this->assertGreaterThanOrEqual(0.45, $attempts[2][1] - $attempts[1][1], 'the second backoff step was not used');
        $this->assertLessThan(2.5, $attempts[2][1] - $attempts[0][1]);
        $this->expectException(NotFoundException::class);
        $this->client->get($id);
    }

    public function testBackoffSteps(): void
    {
        $worker = new Worker($this->client, 't', static function (): void {
        }, ['backoff' => [1, 5, 30]]);
        $this->assertSame([1.0, 1.0, 5.0, 30.0, 30.0, 30.0], array_map([$worker, 'delayFor'], [0, 1, 2, 3, 4, 100]));
        $default = new Worker($this->client, 't', static function (): void {
        });
        $this->assertSame(300.0, $default->delayFor(50));
    }

    public function testJobOutOfRetriesIsBuried(): void
    {
        $topic = self::unique('w');
        $id = $this->client->add($topic, 'x', ['retries' => 0]);
        $worker = new Worker($this->client, [$topic], static function (): void {
            throw new \LogicException('bad job');
        }, ['timeout' => 1, 'logger' => $this->logger()]);
        $this->assertTrue($worker->runOnce());
        $this->assertSame('buried', $this->client->get($id)['state']);
        // one line for the one outcome, not "released" and then "buried"
        $this->assertSame(
            [['error', "job $id failed on attempt 1 (LogicException: bad job); buried: its retries are used up"]],
            $this->logged
        );
        $this->client->delete($id);
    }

    public function testMaxAttemptsBuriesAfterThatManyFailures(): void
    {
        $topic = self::unique('w');
        // no 'retries' from the producer: without max_attempts it would come back forever
        $id = $this->client->add($topic, 'doomed');
        $attempts = [];
        $worker = new Worker($this->client, [$topic], static function (Job $job) use (&$attempts): void {
            $attempts[] = $job->getAttempts();
            throw new \RuntimeException('always');
        }, ['timeout' => 3, 'backoff' => [0.1], 'max_attempts' => 3, 'logger' => $this->logger()]);
        $this->assertTrue($worker->runOnce());
        $this->assertTrue($worker->runOnce());
        $this->assertTrue($worker->runOnce());
        $this->assertSame([1, 2, 3], $attempts);
        $info = $this->client->get($id);
        $this->assertSame(['buried', 3], [$info['state'], $info['attempts']]);
        $this->assertSame([
            ['warning', "job $id failed on attempt 1 (RuntimeException: always); retry in 0.1 s"],
            ['warning', "job $id failed on attempt 2 (RuntimeException: always); retry in 0.1 s"],
            ['error', "job $id failed on attempt 3 (RuntimeException: always); buried after 3 attempts"],
        ], $this->logged);
        $this->assertFalse($worker->runOnce(), 'a buried job was delivered');
        $this->client->delete($id);
    }

    public function testHandlerErrorsOfAnyKindAreCaught(): void
    {
        $topic = self::unique('w');
        $id = $this->client->add($topic, 'x');
        $worker = new Worker($this->client, [$topic], static function (Job $job): void {
            intdiv(1, 0);  // an \Error (DivisionByZeroError), not an \Exception
        }, ['timeout' => 1, 'backoff' => [30]]);
        $this->assertTrue($worker->runOnce());
        $this->assertSame('delay', $this->client->get($id)['state']);
        $this->client->delete($id);
    }

    public function testReleaseOfAJobNoLongerReservedIsLogged(): void
    {
        $topic = self::unique('w');
        $id = $this->client->add($topic, 'x', ['ttr' => 45]);
        $worker = new Worker($this->client, [$topic], function (Job $job, Client $client): void {
            $client->delete($job->getId());
            throw new \RuntimeException('gone');
        }, ['timeout' => 1, 'logger' => $this->logger()]);
        $this->assertTrue($worker->runOnce());
        $this->assertSame([[
            'warning',
            "job $id failed on attempt 1 (RuntimeException: gone) and was no longer reserved "
            . '(its TTR of 45 s passed, or it was deleted)',
        ]], $this->logged);
    }

    public function testRunOnceWhenEmptyAndStop(): void
    {
        $topic = self::unique('w');
        $worker = new Worker($this->client, [$topic], static function (): void {
        }, ['timeout' => 0.3]);
        $t = microtime(true);
        $this->assertFalse($worker->runOnce());
        $this->assertGreaterThanOrEqual(0.25, microtime(true) - $t);

        foreach (range(1, 3) as $i) {
            $this->client->add($topic, $i);
        }
        $n = 0;
        $stopper = null;
        $stopper = new Worker($this->client, [$topic], function () use (&$n, &$stopper): void {
            if (++$n === 2) {
                $stopper->stop();
            }
        }, ['timeout' => 1]);
        $this->assertSame(2, $stopper->run(), 'stop() from the handler ends run() after that job');
        $this->assertTrue($stopper->isStopping());
        $this->assertSame(1, $this->client->stats($topic)['topics'][$topic]['ready']);
        $last = new Worker($this->client, [$topic], static function (): void {
        }, ['timeout' => 1, 'max_jobs' => 1]);
        $this->assertSame(1, $last->run());
        $this->assertSame(3, $this->client->stats($topic)['topics'][$topic]['finished']);
    }

    public function testRunEndsOnAnErrorThatIsNotTheServers(): void
    {
        if (self::token() === null) {
            $this->markTestSkipped('DELAYQ_TOKEN is not set: the server under test has auth off');
        }
        $worker = new Worker(new Client(self::url()), ['x'], static function (): void {
        }, ['timeout' => 0]);
        $this->expectException(UnauthorizedException::class);
        $worker->run();
    }

    public function testSigtermCompletesTheJobInHandThenStops(): void
    {
        $this->requirePcntl();
        $topic = self::unique('sig');
        [$proc, $out, $err] = self::spawnPhp(__DIR__ . '/fixtures/signal_worker.php', [
            self::url(), (string) self::token(), $topic,
        ]);
        $buf = '';
        self::readUntil($out, "running\n", 5, $buf);
        $id = $this->client->add($topic, 'slow');
        self::readUntil($out, "handling $id\n", 5, $buf);
        $this->assertStringContainsString("handling $id\n", $buf, (string) stream_get_contents($err));
        proc_terminate($proc, SIGTERM);
        $t = microtime(true);
        self::readUntil($out, 'stopped', 5, $buf);
        $code = self::waitExit($proc, 5);
        $elapsed = microtime(true) - $t;
        proc_close($proc);
        $this->assertSame("running\nhandling $id\nhandled $id\nstopped handled=1\n", $buf);
        $this->assertSame(0, $code);
        $this->assertLessThan(3.5, $elapsed);
        $stats = $this->client->stats($topic)['topics'][$topic];
        $this->assertSame(1, $stats['finished'], 'the job in hand was not finished');
        $this->assertSame(0, $stats['reserved']);
    }

    public function testSigtermMidJobFailureReleasesIt(): void
    {
        $this->requirePcntl();
        $topic = self::unique('sig');
        [$proc, $out, $err] = self::spawnPhp(__DIR__ . '/fixtures/signal_worker.php', [
            self::url(), (string) self::token(), $topic, '5', 'fail',
        ]);
        $buf = '';
        self::readUntil($out, "running\n", 5, $buf);
        $id = $this->client->add($topic, 'slow', ['ttr' => 60]);
        self::readUntil($out, "handling $id\n", 5, $buf);
        $this->assertStringContainsString("handling $id\n", $buf, (string) stream_get_contents($err));
        proc_terminate($proc, SIGTERM);
        $code = self::waitExit($proc, 5);
        self::readUntil($out, 'stopped', 1, $buf);
        proc_close($proc);
        $this->assertSame(0, $code);
        $this->assertSame("running\nhandling $id\nfailing $id\nstopped handled=1\n", $buf);
        $info = $this->client->get($id);
        $this->assertSame(['delay', 1], [$info['state'], $info['attempts']], 'not released');
        $this->assertEqualsWithDelta(microtime(true) * 1000 + 30000, $info['due'], 5000);
        $this->client->delete($id);
    }

    /**
     * A signal during a 20 s long-poll: the worker process exits within a
     * second, not when the poll would have ended.
     */
    public function testSignalWhileIdleStopsAtOnce(): void
    {
        $this->requirePcntl();
        foreach (['SIGINT' => SIGINT, 'SIGTERM' => SIGTERM] as $name => $signo) {
            $topic = self::unique('sig');
            [$proc, $out] = self::spawnPhp(__DIR__ . '/fixtures/signal_worker.php', [
                self::url(), (string) self::token(), $topic, '20',
            ]);
            $buf = '';
            self::readUntil($out, "running\n", 5, $buf);
            // one job first, so the worker is surely inside its long-poll afterwards
            $id = $this->client->add($topic, 'first');
            self::readUntil($out, "handled $id\n", 5, $buf);
            usleep(300000);
            $status = proc_get_status($proc);
            $t = microtime(true);
            posix_kill($status['pid'], $signo);
            $code = self::waitExit($proc, 5);
            $elapsed = microtime(true) - $t;
            self::readUntil($out, 'stopped', 1, $buf);
            proc_close($proc);
            $this->assertSame(0, $code, $name);
            $this->assertSame("running\nhandling $id\nhandled $id\nstopped handled=1\n", $buf, $name);
            $this->assertLessThan(1.0, $elapsed, "$name: took $elapsed s to stop");
            $stats = $this->client->stats($topic)['topics'][$topic];
            $this->assertSame([1, 0], [$stats['finished'], $stats['reserved']], $name);
        }
    }

    /**
     * N jobs: N pops, each carrying the previous job's finish, and one
     * finish of the last job when run() returns; a Worker that finished
     * each job with a request of its own would make N finishes.
     */
    public function testOneRequestPerJob(): void
    {
        $topic = self::unique('wfap');
        $n = 5;
        $ids = [];
        foreach (range(1, $n) as $i) {
            $ids[] = $this->client->add($topic, $i);
        }
        $seen = [];
        $previous = [];
        $observer = self::newClient();
        $worker = new Worker(self::newClient(), [$topic], function (Job $job) use (&$seen, &$previous, $observer): void {
            if ($seen) {  // the pop that brought this job finished the one before
                try {
                    $previous[] = $observer->get(end($seen))['state'];
                } catch (NotFoundException $e) {
                    $previous[] = 'gone';
                }
            }
            $seen[] = $job->getId();
        }, ['timeout' => 1, 'max_jobs' => $n, 'logger' => $this->logger()]);
        $before = $this->requestCounts();
        $this->assertSame($n, $worker->run());
        $after = $this->requestCounts();
        $this->assertSame($ids, $seen);
        $this->assertSame(array_fill(0, $n - 1, 'gone'), $previous);
        $this->assertSame($n, self::requestsBetween($before, $after, 'pop'));
        $this->assertSame(1, self::requestsBetween($before, $after, 'finish'), "one finish: the last job's, when run() returned");
        $this->assertSame(1, self::requestsBetween($before, $after, 'finish', 'ok'));
        $stats = $this->client->stats($topic)['topics'][$topic];
        $this->assertSame([$n, 0, $n], [$stats['finished'], $stats['reserved'], $stats['popped']]);
        $lines = array_map(static function (string $id): array {
            return ['info', "job $id finished (attempt 1)"];
        }, $ids);
        $this->assertSame($lines, $this->logged);
    }

    /**
     * The finish rides on the next long-poll and is done at once, before
     * the wait; SIGTERM cuts that poll short, so the worker cannot know and
     * finishes again on its own: not_found, which is no news.
     */
    public function testSigtermWhilePollingSendsTheCarriedFinishAgain(): void
    {
        $this->requirePcntl();
        $topic = self::unique('sig');
        [$proc, $out, $err] = self::spawnPhp(__DIR__ . '/fixtures/signal_worker.php', [
            self::url(), (string) self::token(), $topic, '20',
        ]);
        $buf = '';
        self::readUntil($out, "running\n", 5, $buf);
        $id = $this->client->add($topic, 'x');
        self::readUntil($out, "handled $id\n", 5, $buf);
        $deadline = microtime(true) + 5;
        while ($this->client->stats($topic)['topics'][$topic]['finished'] !== 1 && microtime(true) < $deadline) {
            usleep(20000);
        }
        $this->assertSame(1, $this->client->stats($topic)['topics'][$topic]['finished'], 'the finish did not ride on the poll');
        $before = $this->requestCounts();
        usleep(200000);
        $status = proc_get_status($proc);
        $this->assertTrue($status['running'], (string) stream_get_contents($err));
        posix_kill($status['pid'], SIGTERM);
        $code = self::waitExit($proc, 5);
        self::readUntil($out, 'stopped', 1, $buf);
        proc_close($proc);
        $after = $this->requestCounts();
        $this->assertSame(0, $code);
        $this->assertSame("running\nhandling $id\nhandled $id\nstopped handled=1\n", $buf);
        $this->assertSame(1, self::requestsBetween($before, $after, 'finish'));
        $this->assertSame(1, self::requestsBetween($before, $after, 'finish', 'not_found'));
        $this->assertSame(0, $this->client->stats($topic)['topics'][$topic]['reserved']);
    }

    /**
     * The handler makes Redis read-only (a replica of a dead primary): the
     * next pops, carrying the finish, answer 503 and change nothing; once
     * Redis takes writes again a pop carries it again and it is done, with
     * no finish request of its own.
     */
    public function testCarriedFinishSurvivesAnOutage(): void
    {
        self::redis('PING');  // skips without DELAYQ_TEST_REDIS
        $topic = self::unique('wout');
        $id = $this->client->add($topic, 'x');
        $dead = (string) self::deadPort();
        $failed = 0;
        $worker = null;
        $logger = function (string $level, string $message) use (&$failed, &$worker, $id): void {
            $this->logged[] = [$level, $message];
            if (strpos($message, 'delayq request failed') === 0 && ++$failed === 2) {
                self::redis('REPLICAOF', 'NO', 'ONE');
            }
            if ($message === "job $id finished (attempt 1)") {
                $worker->stop();
            }
        };
        $worker = new Worker(self::newClient(), [$topic], static function () use ($dead): void {
            self::redis('REPLICAOF', '127.0.0.1', $dead);
        }, ['timeout' => 1, 'error_pause' => 0.05, 'logger' => $logger]);
        $before = $this->requestCounts();
        try {
            $this->assertSame(1, $worker->run());
        } finally {
            self::redis('REPLICAOF', 'NO', 'ONE');
        }
        $after = $this->requestCounts();
        $this->assertGreaterThanOrEqual(2, self::requestsBetween($before, $after, 'pop', 'unavailable'));
        $this->assertSame(0, self::requestsBetween($before, $after, 'finish'));
        $this->assertSame(1, $this->client->stats($topic)['topics'][$topic]['finished']);
        $levels = array_count_values(array_column($this->logged, 0));
        $this->assertSame(['error' => 2, 'info' => 1], $levels, json_encode($this->logged));
        $this->assertStringContainsString('Redis', $this->logged[0][1]);
    }

    public function testCarriesTheFinishAgainAfter504And503(): void
    {
        $url = self::fakeSequence(['pop' => [
            [200, '{"success":true,"id":"j1","topic":"t","value":"v","attempts":1,"ttr":60}'],
            [504, '{"success":false,"code":"timeout","error":"no answer from redis"}'],
            [503, '{"success":false,"code":"unavailable","error":"redis is down"}'],
            [200, '{"success":true,"id":null,"value":null,"finished":[{"id":"j1","success":false,'
                . '"code":"not_found","error":"no job with this id"}]}'],
        ]]);
        $worker = null;
        $logger = function (string $level, string $message) use (&$worker): void {
            $this->logged[] = [$level, $message];
            if (strpos($message, 'finished already') !== false) {
                $worker->stop();
            }
        };
        $worker = new Worker(new Client($url), ['t'], static function (): void {
        }, ['timeout' => 1, 'error_pause' => 0.01, 'logger' => $logger]);
        $this->assertSame(1, $worker->run());
        $requests = self::seqRequests($url);
        $this->assertSame(['pop', 'pop', 'pop', 'pop'], array_column($requests, 0));
        $this->assertSame([null, ['j1'], ['j1'], ['j1']], array_map(static function (array $r) {
            return $r[1]['finish'] ?? null;
        }, $requests));
        $this->assertSame(['error', 'error', 'info'], array_column($this->logged, 0), json_encode($this->logged));
        // the finish after the 504 may have been done: its not_found is no news
        $this->assertSame('job j1 was finished already (by a request whose answer was lost)', $this->logged[2][1]);
    }

    public function testServerWithoutFinishAndPop(): void
    {
        $url = self::fakeSequence(['pop' => [
            [200, '{"success":true,"id":"j1","topic":"t","value":"v","attempts":1,"ttr":60}'],
            [400, '{"success":false,"code":"bad_request","error":"field \'finish\' is not a field of pop"}'],
            [200, '{"success":true,"id":"j2","topic":"t","value":"v","attempts":1,"ttr":60}'],
        ]]);
        $worker = new Worker(new Client($url), ['t'], static function (): void {
        }, ['timeout' => 1, 'max_jobs' => 2, 'logger' => $this->logger()]);
        $this->assertSame(2, $worker->run());
        $this->assertSame([
            ['pop', ['topics' => ['t'], 'timeout' => 1.0]],
            ['pop', ['topics' => ['t'], 'timeout' => 1.0, 'finish' => ['j1']]],
            ['finish', ['id' => 'j1']],
            ['pop', ['topics' => ['t'], 'timeout' => 1.0]],
            ['finish', ['id' => 'j2']],
        ], self::seqRequests($url));
        $this->assertSame([
            ['warning', "the server does not take finish on pop (field 'finish' is not a field of pop); "
                . 'finishing each job with a request of its own'],
            ['info', 'job j1 finished (attempt 1)'],
            ['info', 'job j2 finished (attempt 1)'],
        ], $this->logged);
    }

    public function testBadOptions(): void
    {
        $noop = static function (): void {
        };
        foreach ([
            [[], []],
            ['t', ['backoff' => []]],
            ['t', ['backoff' => [-1]]],
            ['t', ['timeout' => 61]],
            ['t', ['max_job' => 1]],
            ['t', ['max_attempts' => 0]],
            ['t', ['max_attempts' => '3']],
        ] as [$topics, $options]) {
            try {
                new Worker($this->client, $topics, $noop, $options);
                $this->fail('no exception for ' . json_encode([$topics, $options]));
            } catch (\InvalidArgumentException $e) {
                $this->assertNotSame('', $e->getMessage());
            }
        }
    }

    private function requirePcntl(): void
    {
        if (!function_exists('pcntl_async_signals')) {
            $this->markTestSkipped('ext-pcntl is not loaded');
        }
    }
}
