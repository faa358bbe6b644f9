<?php

declare(strict_types=1);

namespace Delayq\Tests;

use Delayq\ServerException;
use Delayq\TimeoutException;
use Delayq\UnavailableException;
use Delayq\Worker;

/**
 * With delayq's Redis stopped (the test runner stops it, then runs this group
 * with DELAYQ_REDIS_DOWN=1): every command is a 503, an UnavailableException,
 * which is a ServerException and not a TimeoutException.
 *
 * @group redis-down
 */
final class RedisDownTest extends DelayqTestCase
{
    protected function setUp(): void
    {
        if (getenv('DELAYQ_REDIS_DOWN') !== '1') {
            $this->markTestSkipped('needs delayq with its Redis stopped and DELAYQ_REDIS_DOWN=1');
        }
        parent::setUp();
        try {
            $this->client->health();
            $this->fail('DELAYQ_REDIS_DOWN=1 but delayq says its Redis is up');
        } catch (UnavailableException $e) {
        }
    }

    public function testEveryCommandIsUnavailable(): void
    {
        $calls = [
            'add' => function () {
                $this->client->add('down', 'x', ['id' => 'down-1']);
            },
            'addMany' => function () {
                $this->client->addMany([['topic' => 'down', 'body' => 1]]);
            },
            'pop' => function () {
                $this->client->pop('down');
            },
            'pop long-poll' => function () {
                $this->client->pop('down', 1);
            },
            'popMany' => function () {
                $this->client->popMany(['down', 'other'], 5);
            },
            'pop with finish' => function () {
                $this->client->pop('down', 0, 'down-1');
            },
            'finish' => function () {
                $this->client->finish('down-1');
            },
            'deleteMany' => function () {
                $this->client->deleteMany(['down-1', 'down-2']);
            },
            'get' => function () {
                $this->client->get('down-1');
            },
            'release' => function () {
                $this->client->release('down-1', 1);
            },
            'kick' => function () {
                $this->client->kick('down', 5);
            },
            'reschedule' => function () {
                $this->client->reschedule('down-1', ['delay' => 1]);
            },
            'jobs' => function () {
                $this->client->jobs('down', 'ready');
            },
            'pause' => function () {
                $this->client->pause('down');
            },
            'resume' => function () {
                $this->client->resume('down');
            },
            'stats' => function () {
                $this->client->stats();
            },
            'health' => function () {
                $this->client->health();
            },
        ];
        foreach ($calls as $what => $call) {
            try {
                $call();
                $this->fail("$what: no exception with Redis down");
            } catch (ServerException $e) {
                $this->assertSame(UnavailableException::class, get_class($e), "$what: " . $e->getMessage());
                $this->assertNotInstanceOf(TimeoutException::class, $e, $what);
                $this->assertSame(503, $e->getHttpStatus(), $what);
                $this->assertSame('unavailable', $e->getErrorCode(), $what);
                $this->assertSame(false, $e->getResponse()['success'], $what);
            }
        }
    }

    public function testHealthSaysRedisIsDown(): void
    {
        try {
            $this->client->health();
            $this->fail('health answered ok with Redis down');
        } catch (UnavailableException $e) {
            $this->assertSame('down', $e->getResponse()['redis']);
        }
    }

    public function testWorkerRunKeepsGoingThroughOutages(): void
    {
        $errors = [];
        $worker = null;
        $worker = new Worker($this->client, ['down'], static function (): void {
        }, [
            'timeout' => 0.2,
            'error_pause' => 0.1,
            'logger' => function (string $level, string $message) use (&$errors, &$worker): void {
                if ($level === 'error') {
                    $errors[] = $message;
                    if (count($errors) === 3) {
                        $worker->stop();
                    }
                }
            },
        ]);
        $t = microtime(true);
        $this->assertSame(0, $worker->run());
        $this->assertCount(3, $errors);
        $this->assertStringStartsWith('delayq request failed: ', $errors[0]);
        $this->assertStringEndsWith('; retrying in 0.1 s', $errors[0]);
        $this->assertLessThan(3.0, microtime(true) - $t);
    }
}
