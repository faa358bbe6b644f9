<?php

declare(strict_types=1);

namespace Delayq\Tests;

use Delayq\BadRequestException;
use Delayq\Client;
use Delayq\ConflictException;
use Delayq\ConnectionException;
use Delayq\ConnectionLostException;
use Delayq\DelayqException;
use Delayq\NotFoundException;
use Delayq\ServerException;
use Delayq\TimeoutException;
use Delayq\TooLargeException;
use Delayq\UnauthorizedException;
use Delayq\UnavailableException;

/**
 * One exception class per error code: 4xx from the real delayq, transport
 * failures against a dead port, and 5xx / malformed answers from a fake
 * server (php -S with tests/fixtures/fake_server.php).
 */
final class ErrorTest extends DelayqTestCase
{
    private function fake(string $route, array $options = []): Client
    {
        return new Client(self::fakeServerUrl() . $route, $options);
    }

    /**
     * Runs $call, which must throw exactly $class with $code and $status.
     */
    private function assertThrows(string $class, string $code, int $status, callable $call, string $what = ''): DelayqException
    {
        try {
            $call();
        } catch (DelayqException $e) {
            $this->assertSame($class, get_class($e), "$what: " . $e->getMessage());
            $this->assertSame($code, $e->getErrorCode(), $what);
            $this->assertSame($status, $e->getHttpStatus(), $what);
            $this->assertNotSame('', $e->getMessage(), $what);
            return $e;
        }
        $this->fail("$what: no exception; expected $class");
    }

    public function testExceptionHierarchy(): void
    {
        foreach ([BadRequestException::class, UnauthorizedException::class, NotFoundException::class,
                     ConflictException::class, TooLargeException::class] as $class) {
            $this->assertSame(DelayqException::class, get_parent_class($class), $class);
        }
        $this->assertSame(DelayqException::class, get_parent_class(ServerException::class));
        $this->assertSame(ServerException::class, get_parent_class(UnavailableException::class));
        $this->assertSame(ServerException::class, get_parent_class(TimeoutException::class));
        $this->assertSame(UnavailableException::class, get_parent_class(ConnectionException::class));
        $this->assertSame(TimeoutException::class, get_parent_class(ConnectionLostException::class));
        $this->assertTrue(is_subclass_of(DelayqException::class, \RuntimeException::class));
    }

    public function testBadRequest(): void
    {
        $topic = self::unique();
        $cases = [
            'topic with a space' => function () {
                $this->client->add('a b', 1);
            },
            'ttr 0' => function () use ($topic) {
                $this->client->add($topic, 1, ['ttr' => 0]);
            },
            'delay and at' => function () use ($topic) {
                $this->client->add($topic, 1, ['delay' => 1, 'at' => time() + 5]);
            },
            'negative delay' => function () use ($topic) {
                $this->client->add($topic, 1, ['delay' => -1]);
            },
            'id with bad characters' => function () use ($topic) {
                $this->client->add($topic, 1, ['id' => 'a$b']);
            },
            'delay as a string' => function () use ($topic) {
                $this->client->add($topic, 1, ['delay' => '30']);
            },
            'pop timeout 61' => function () use ($topic) {
                $this->client->pop($topic, 61);
            },
            'popMany count 0' => function () use ($topic) {
                $this->client->popMany($topic, 0);
            },
            'popMany count 101' => function () use ($topic) {
                $this->client->popMany($topic, 101);
            },
            'kick count 0' => function () use ($topic) {
                $this->client->kick($topic, 0);
            },
            'empty batch' => function () {
                $this->client->finishMany([]);
            },
        ];
        foreach ($cases as $what => $call) {
            $e = $this->assertThrows(BadRequestException::class, 'bad_request', 400, $call, $what);
            $this->assertNotInstanceOf(ServerException::class, $e);
            $this->assertSame(['success' => false, 'error' => $e->getMessage(), 'code' => 'bad_request'], $e->getResponse());
        }
        $this->assertSame(0, $this->client->stats($topic)['topics'][$topic]['added'], 'a refused add wrote');
    }

    public function testUnknownCommand(): void
    {
        $e = $this->assertThrows(BadRequestException::class, 'bad_request', 400, function () {
            $this->client->call('nope');
        }, 'unknown command');
        $this->assertSame('unknown_command', $e->getResponse()['reason']);
    }

    public function testBadBatchWritesNothing(): void
    {
        $topic = self::unique();
        $id = self::unique('ok');
        $e = $this->assertThrows(BadRequestException::class, 'bad_request', 400, function () use ($topic, $id) {
            $this->client->addMany([
                ['topic' => $topic, 'id' => $id, 'body' => 1],
                ['topic' => $topic, 'body' => 2, 'ttr' => -5],
            ]);
        });
        $this->assertStringContainsString('jobs[1].ttr', $e->getMessage());
        $e = $this->assertThrows(NotFoundException::class, 'not_found', 404, function () use ($id) {
            $this->client->get($id);
        });
        $e = $this->assertThrows(BadRequestException::class, 'bad_request', 400, function () use ($id) {
            $this->client->deleteMany([$id, 'bad id']);
        });
        $this->assertStringContainsString('ids[1]', $e->getMessage());
    }

    public function testNotFound(): void
    {
        $id = self::unique('missing');
        $calls = [
            'finish' => function () use ($id) {
                $this->client->finish($id);
            },
            'delete' => function () use ($id) {
                $this->client->delete($id);
            },
            'get' => function () use ($id) {
                $this->client->get($id);
            },
            'touch' => function () use ($id) {
                $this->client->touch($id);
            },
            'release' => function () use ($id) {
                $this->client->release($id, 1);
            },
            'bury' => function () use ($id) {
                $this->client->bury($id);
            },
        ];
        foreach ($calls as $what => $call) {
            $this->assertThrows(NotFoundException::class, 'not_found', 404, $call, $what);
        }
    }

    public function testConflict(): void
    {
        $topic = self::unique();
        $id = $this->client->add($topic, 'first', ['id' => self::unique('dup')]);
        $e = $this->assertThrows(ConflictException::class, 'conflict', 409, function () use ($topic, $id) {
            $this->client->add($topic, 'second', ['id' => $id]);
        }, 'add with a live id');
        $this->assertStringContainsString($id, $e->getMessage());
        $this->assertSame('first', $this->client->get($id)['value']);
        // not reserved (it is ready)
        foreach (['touch', 'release', 'bury'] as $command) {
            $this->assertThrows(ConflictException::class, 'conflict', 409, function () use ($command, $id) {
                $this->client->$command($id);
            }, $command);
        }
        $this->client->delete($id);
    }

    public function testTooLarge(): void
    {
        $topic = self::unique();
        // over the job body limit (max_body, 64 KiB): delayq's answer
        $e = $this->assertThrows(TooLargeException::class, 'too_large', 413, function () use ($topic) {
            $this->client->add($topic, str_repeat('x', 70000));
        }, 'a 70 kB body');
        $this->assertStringContainsString('body', $e->getMessage());
        // over the request limit (1 MiB): nginx's answer, rewritten as protocol JSON
        $jobs = [];
        for ($i = 0; $i < 40; $i++) {
            $jobs[] = ['topic' => $topic, 'body' => str_repeat('y', 30000)];
        }
        $this->assertThrows(TooLargeException::class, 'too_large', 413, function () use ($jobs) {
            $this->client->addMany($jobs);
        }, 'a 1.2 MB request');
        $this->assertSame(0, $this->client->stats($topic)['topics'][$topic]['added']);
        // the client still works after nginx refused a body
        $this->client->add($topic, str_repeat('z', 60000), ['id' => "$topic-ok"]);
        $this->assertSame(60000, strlen($this->client->pop($topic)->getValue()));
        $this->client->finish("$topic-ok");
    }

    public function testUnauthorized(): void
    {
        if (self::token() === null) {
            $this->markTestSkipped('DELAYQ_TOKEN is not set: the server under test has auth off');
        }
        $topic = self::unique();
        foreach ([null, 'wrong-token-0123456789'] as $token) {
            $client = new Client(self::url(), ['token' => $token]);
            $label = $token === null ? 'no token' : 'a wrong token';
            $this->assertThrows(UnauthorizedException::class, 'unauthorized', 401, function () use ($client, $topic) {
                $client->add($topic, 1);
            }, "add with $label");
            $this->assertThrows(UnauthorizedException::class, 'unauthorized', 401, function () use ($client) {
                $client->metrics();
            }, "metrics with $label");
            // health needs no token (load balancers)
            $this->assertSame('ok', $client->health()['redis']);
        }
        $this->assertSame(0, $this->client->stats($topic)['topics'][$topic]['added']);
    }

    public function testConnectionRefused(): void
    {
        $client = new Client('http://127.0.0.1:' . self::deadPort());
        foreach (['stats', 'health', 'metrics'] as $command) {
            $e = $this->assertThrows(ConnectionException::class, 'unavailable', 0, function () use ($client, $command) {
                $client->$command();
            }, $command);
            $this->assertInstanceOf(UnavailableException::class, $e);
            $this->assertInstanceOf(ServerException::class, $e);
            $this->assertNotInstanceOf(TimeoutException::class, $e);
            $this->assertSame(7, $e->getCurlErrno());
            $this->assertNull($e->getResponse());
        }
    }

    public function testServerErrorsByCode(): void
    {
        $e = $this->assertThrows(UnavailableException::class, 'unavailable', 503, function () {
            $this->fake('/json/503/unavailable')->add('t', 1);
        }, '503');
        $this->assertInstanceOf(ServerException::class, $e);
        $this->assertSame('fake unavailable answer', $e->getMessage());

        $e = $this->assertThrows(TimeoutException::class, 'timeout', 504, function () {
            $this->fake('/json/504/timeout')->add('t', 1);
        }, '504');
        $this->assertInstanceOf(ServerException::class, $e);
        $this->assertNotInstanceOf(UnavailableException::class, $e);

        $this->assertThrows(ServerException::class, 'internal', 500, function () {
            $this->fake('/json/500/internal')->pop('t');
        }, '500 internal');
        $this->assertThrows(UnauthorizedException::class, 'unauthorized', 401, function () {
            $this->fake('/json/401/unauthorized')->metrics();
        }, '401 on metrics');
        // an unknown code of the 4xx range: the base class
        $this->assertThrows(DelayqException::class, 'teapot', 418, function () {
            $this->fake('/json/418/teapot')->stats();
        }, 'unknown 4xx code');
    }

    public function testAnswersThatAreNotProtocolJson(): void
    {
        // a proxy's HTML error page: the class follows the HTTP status
        $e = $this->assertThrows(ServerException::class, 'server_error', 502, function () {
            $this->fake('/text/502')->stats();
        }, '502 html');
        $this->assertStringContainsString('not JSON', $e->getMessage());
        $this->assertNull($e->getResponse());
        $this->assertThrows(UnavailableException::class, 'unavailable', 503, function () {
            $this->fake('/text/503')->stats();
        }, '503 html');
        $this->assertThrows(TimeoutException::class, 'timeout', 504, function () {
            $this->fake('/text/504')->add('t', 1);
        }, '504 html');
        $this->assertThrows(NotFoundException::class, 'not_found', 404, function () {
            $this->fake('/text/404')->stats();
        }, '404 html (a wrong URL)');
        // a 200 that is not a success answer (a wrong URL served by something else)
        $this->assertThrows(ServerException::class, 'server_error', 200, function () {
            $this->fake('/text/200')->stats();
        }, '200 html');
    }

    public function testNoAnswerInTimeIsConnectionLost(): void
    {
        $client = $this->fake('/sleep/800', ['timeout' => 0.3]);
        $t = microtime(true);
        $e = $this->assertThrows(ConnectionLostException::class, 'timeout', 0, function () use ($client) {
            $client->add('t', 1);
        });
        $this->assertLessThan(0.7, microtime(true) - $t);
        $this->assertInstanceOf(TimeoutException::class, $e);
        $this->assertNotInstanceOf(UnavailableException::class, $e);
        $this->assertSame(28, $e->getCurlErrno());
        // The long-poll time is added to the client timeout: a pop waiting 2 s
        // may take 2.3 s (here: the rest of the sleep above, then 0.6 s).
        $this->assertNull($this->fake('/sleep/600', ['timeout' => 0.3])->pop('t', 2));
    }

    public function testPopFinishAnswerWithoutFinished(): void
    {
        // a pop that carried 'finish' must answer 'finished'
        $e = $this->assertThrows(ServerException::class, 'server_error', 200, function () {
            $this->fake('/sleep/0')->pop('t', 0, 'j1');
        }, 'no finished');
        $this->assertStringContainsString("'finished'", $e->getMessage());
        $this->assertNull($this->fake('/sleep/0')->pop('t'), 'without finish none is needed');
    }

    public function testRequestShape(): void
    {
        $client = $this->fake('/echo', ['token' => 'tok-123', 'user_agent' => 'shop/1.0']);
        $request = $client->call('add', [])['request'];
        $this->assertSame('POST', $request['method']);
        $this->assertSame('/echo/add', $request['path']);
        $this->assertSame('{}', $request['body'], 'no fields is an empty JSON object');
        $this->assertSame('Bearer tok-123', $request['headers']['authorization']);
        $this->assertSame('application/json', $request['headers']['content-type']);
        $this->assertSame('shop/1.0', $request['headers']['user-agent']);
        $this->assertArrayNotHasKey('expect', $request['headers']);

        $echo = function (string $command, array $fields) use ($client): string {
            return $client->call($command, $fields)['request']['body'];
        };
        $this->assertSame('{"topic":"t","body":"{\"a\":1}"}', $echo('add', ['topic' => 't', 'body' => '{"a":1}']));
        $this->assertSame('{"topic":"t/é","body":{"a":[1,2.0,"x"]},"delay":1.5}', $echo('add', [
            'topic' => 't/é', 'body' => ['a' => [1, 2.0, 'x']], 'delay' => 1.5,
        ]));
        $this->assertSame('{"id":"x","delay":0.0}', $echo('release', ['id' => 'x', 'delay' => 0.0]));

        // what the typed methods send (the echo answer's id and state are the request body)
        $this->assertSame('{"topic":"t","body":"b","id":"x"}', $client->add('t', 'b', ['id' => 'x', 'delay' => null]));
        $this->assertSame('{"topic":"t","body":null,"ttr":2.5}', $client->add('t', null, ['ttr' => 2.5]));
        $this->assertSame('{"topic":"t","body":[]}', $client->add('t', []));
        $this->assertSame('{"topic":"t","body":{}}', $client->add('t', new \stdClass()));
        $this->assertSame('{"id":"x","delay":0.0}', $client->release('x'));
        $this->assertSame('{"id":"x","delay":2.5}', $client->release('x', 2.5));
        $this->assertSame('{"topic":"a"}', $client->pop('a')->getId());
        $this->assertSame('{"topic":"a,b","timeout":1.5}', $client->pop('a,b', 1.5)->getId());
        $this->assertSame('{"topics":["a","b"],"count":3,"timeout":0.5}', $client->popMany(['a', 'b'], 3, 0.5)[0]->getId());
        $this->assertSame('{"topic":"a","count":1}', $client->popMany('a', 1)[0]->getId());
        // finish-and-pop: one id as a string, several as a list, [] as nothing
        $finished = null;
        $this->assertSame('{"topic":"a","finish":"j1"}', $client->pop('a', 0, 'j1', $finished)->getId());
        $this->assertSame([], $finished);
        $this->assertSame('{"topics":["a","b"],"count":2,"timeout":1.0,"finish":["x","y"]}',
            $client->popMany(['a', 'b'], 2, 1.0, ['x', 'y'], $finished)[0]->getId());
        $this->assertSame('{"topic":"a","finish":["z"]}', $client->pop('a', 0, [3 => 'z'])->getId());
        $finished = ['stale'];
        $this->assertSame('{"topic":"a"}', $client->pop('a', 0, [], $finished)->getId());
        $this->assertSame([], $finished);
        $this->assertSame('{"topic":"t","state":"ready","limit":5}', $client->jobs('t', 'ready', 5)['jobs'][0]['id']);
        $this->assertSame('{"topic":"t","state":"buried","cursor":"c1"}', $client->jobs('t', 'buried', null, 'c1')['jobs'][0]['id']);
        $this->assertSame('{"id":"x","delay":1.5}', $client->reschedule('x', ['delay' => 1.5])['id']);
        $this->assertSame('{"id":"x","at":1767225600}', $client->reschedule('x', ['at' => 1767225600])['id']);
        $this->assertSame('{"ids":["x","y"]}', $client->call('finish', ['ids' => ['x', 'y']])['id']);
        $this->assertSame('{"topic":"a","count":1}', $client->call('kick', ['topic' => 'a', 'count' => 1])['id']);
        $this->assertSame('{}', $client->call('stats')['id']);
        $this->assertSame('{"topic":"a"}', $client->call('stats', ['topic' => 'a'])['id']);
        $no = new Client(self::fakeServerUrl() . '/echo');
        $this->assertArrayNotHasKey('authorization', $no->call('stats')['request']['headers']);
    }

    public function testClientSideErrors(): void
    {
        $e = $this->assertThrows(BadRequestException::class, 'bad_request', 0, function () {
            $this->client->add('t', "\xff\xfe not UTF-8");
        }, 'a body that is not UTF-8');
        $this->assertInstanceOf(\JsonException::class, $e->getPrevious());

        $invalid = [
            'unknown add option' => function () {
                $this->client->add('t', 1, ['dealy' => 5]);
            },
            'addMany job without body' => function () {
                $this->client->addMany([['topic' => 't']]);
            },
            'unknown client option' => function () {
                new Client('http://127.0.0.1:8080', ['tokn' => 'x']);
            },
            'URL without scheme' => function () {
                new Client('127.0.0.1:8080');
            },
            'topics of the wrong type' => function () {
                $this->client->pop(42);
            },
            'finish of the wrong type' => function () {
                $this->client->pop('t', 0, 42);
            },
        ];
        foreach ($invalid as $what => $call) {
            try {
                $call();
                $this->fail("$what: no exception");
            } catch (\InvalidArgumentException $e) {
                $this->assertNotSame('', $e->getMessage());
            }
        }
    }
}
