<?php

declare(strict_types=1);

namespace Delayq\Tests;

use Delayq\BadRequestException;
use Delayq\Client;
use Delayq\ConflictException;
use Delayq\Job;
use Delayq\NotFoundException;

/** Every command of the protocol through Client, against a real delayq. */
final class ClientTest extends DelayqTestCase
{
    public function testAddPopFinish(): void
    {
        $topic = self::unique('order');
        $id = self::unique('order');
        $this->assertSame($id, $this->client->add($topic, ['order' => 42], ['id' => $id, 'ttr' => 30]));

        $job = $this->client->pop($topic);
        $this->assertInstanceOf(Job::class, $job);
        $this->assertSame($id, $job->getId());
        $this->assertSame($topic, $job->getTopic());
        $this->assertSame(['order' => 42], $job->getValue());
        $this->assertSame(1, $job->getAttempts());
        $this->assertSame(30.0, $job->getTtr());
        $this->assertSame(
            ['id' => $id, 'topic' => $topic, 'value' => ['order' => 42], 'attempts' => 1, 'ttr' => 30.0],
            $job->toArray()
        );
        $this->assertSame('reserved', $this->client->get($id)['state']);

        $this->client->finish($id);
        $this->assertNull($this->client->pop($topic));
        $stats = $this->client->stats($topic)['topics'][$topic];
        $this->assertSame(1, $stats['added']);
        $this->assertSame(1, $stats['finished']);
        $this->assertSame(0, $stats['reserved']);
    }

    public function testKey(): void
    {
        $topic = self::unique('key');
        $keyed = $this->client->add($topic, 1, ['key' => 'merchant-42']);
        $plain = $this->client->add($topic, 2);
        $this->assertSame('merchant-42', $this->client->get($keyed)['key']);
        $this->assertArrayNotHasKey('key', $this->client->get($plain));
        $results = $this->client->addMany([['topic' => $topic, 'body' => 3, 'key' => 'm/7']]);
        $this->assertTrue($results[0]['success']);
        $first = $this->client->pop($topic);
        $this->assertSame($keyed, $first->getId());
        $this->assertSame('merchant-42', $first->getKey());
        $this->assertSame('merchant-42', $first->toArray()['key']);
        $second = $this->client->pop($topic);
        $this->assertNull($second->getKey());
        $this->assertArrayNotHasKey('key', $second->toArray());
        $this->assertSame('m/7', $this->client->pop($topic)->getKey());
        try {
            $this->client->add($topic, 1, ['key' => 'a b']);
            $this->fail('a bad key was accepted');
        } catch (BadRequestException $e) {
            $this->assertStringContainsString("'key'", $e->getMessage());
        }
    }

    public function testTraceContext(): void
    {
        $topic = self::unique('trace');
        $tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
        $traced = $this->client->add($topic, 1, ['traceparent' => $tp, 'tracestate' => 'rojo=1']);
        $plain = $this->client->add($topic, 2);
        $got = $this->client->get($traced);
        $this->assertSame([$tp, 'rojo=1'], [$got['traceparent'], $got['tracestate']]);
        $this->assertArrayNotHasKey('traceparent', $this->client->get($plain));
        $results = $this->client->addMany([['topic' => $topic, 'body' => 3, 'traceparent' => $tp]]);
        $this->assertTrue($results[0]['success']);
        $first = $this->client->pop($topic);
        $this->assertSame($traced, $first->getId());
        $this->assertSame([$tp, 'rojo=1'], [$first->getTraceparent(), $first->getTracestate()]);
        $this->assertSame($tp, $first->toArray()['traceparent']);
        $this->assertSame('rojo=1', $first->toArray()['tracestate']);
        $second = $this->client->pop($topic);
        $this->assertNull($second->getTraceparent());
        $this->assertNull($second->getTracestate());
        $this->assertArrayNotHasKey('traceparent', $second->toArray());
        $third = $this->client->pop($topic);
        $this->assertSame([$tp, null], [$third->getTraceparent(), $third->getTracestate()]);
        try {
            $this->client->add($topic, 1, ['traceparent' => strtoupper($tp)]);
            $this->fail('an uppercase traceparent was accepted');
        } catch (BadRequestException $e) {
            $this->assertStringContainsString("'traceparent'", $e->getMessage());
        }
        try {
            $this->client->add($topic, 1, ['traceparent' => $tp, 'tracestate' => str_repeat('a', 513)]);
            $this->fail('a tracestate over 512 bytes was accepted');
        } catch (BadRequestException $e) {
            $this->assertStringContainsString("'tracestate'", $e->getMessage());
        }
    }

    public function testPolicy(): void
    {
        $topic = self::unique('pol');
        $this->assertSame(
            ['concurrency' => 5, 'rate' => null, 'period' => 0.5, 'key_concurrency' => 1,
             'key_rate' => null, 'key_period' => null, 'keep' => null],
            $this->client->policy($topic, ['concurrency' => 5, 'period' => 0.5, 'key_concurrency' => 1])
        );
        $this->assertNull($this->client->policy($topic, ['period' => null])['period']);
        $this->assertSame(5, $this->client->policies($topic)[$topic]['concurrency']);
        $this->assertArrayHasKey($topic, $this->client->policies());
        $this->assertNull($this->client->policies($topic)[$topic]['tokens']);
        $this->client->policy($topic, ['rate' => 12, 'period' => 60]);
        $this->assertSame(12, $this->client->policies($topic)[$topic]['tokens']);
        $this->client->policy($topic, ['rate' => null, 'period' => null]);
        try {
            $this->client->policy($topic, ['rate' => 0]);
            $this->fail('a bad policy was accepted');
        } catch (BadRequestException $e) {
            $this->assertStringContainsString("'rate'", $e->getMessage());
        }
        $this->client->policy($topic, ['concurrency' => null, 'key_concurrency' => null]);
        $this->assertSame([], $this->client->policies($topic));
    }

    public function testKeptHistory(): void
    {
        $topic = self::unique('kept');
        $this->assertSame(60, $this->client->policy($topic, ['keep' => 60])['keep']);
        $id = $this->client->add($topic, ['n' => 1], ['key' => 'merchant-1']);
        $this->assertSame($id, $this->client->pop($topic)->getId());
        $this->client->finish($id);
        $rec = $this->client->get($id);
        $this->assertSame('finished', $rec['state']);
        $this->assertSame(1, $rec['attempts']);
        $this->assertSame('merchant-1', $rec['key']);
        $this->assertArrayNotHasKey('value', $rec, 'a record has no body');
        $this->assertLessThanOrEqual($rec['ended'], $rec['first_delivered']);
        $other = $this->client->add($topic, 2);
        $this->client->delete($other);
        $this->assertSame([$id], array_column($this->client->jobs($topic, 'finished')['jobs'], 'id'));
        $this->assertSame([$other], array_column($this->client->jobs($topic, 'deleted')['jobs'], 'id'));
        try {
            $this->client->add($topic, ['n' => 1], ['id' => $id, 'key' => 'merchant-1']);
            $this->fail('an add of a kept id was accepted');
        } catch (ConflictException $e) {
            $this->assertStringContainsString('was finished at', $e->getMessage());
        }
    }

    public function testUpsert(): void
    {
        $topic = self::unique('upsert');
        $id = self::unique('upsert');
        $this->assertFalse($this->client->upsert($topic, $id, ['v' => 1], ['delay' => 30]), 'none: created');
        $this->assertTrue($this->client->upsert($topic, $id, ['v' => 2], ['ttr' => 5]), 'delayed: replaced');
        $got = $this->client->get($id);
        $this->assertSame(['ready', ['v' => 2], 5], [$got['state'], $got['value'], $got['ttr']]);
        $this->assertSame($id, $this->client->add($topic, ['v' => 3], ['id' => $id, 'replace' => true]));
        $this->assertSame(['v' => 3], $this->client->pop($topic)->getValue());
        try {
            $this->client->upsert($topic, $id, ['v' => 4]);
            $this->fail('a reserved job was replaced');
        } catch (ConflictException $e) {
            $this->assertStringContainsString('reserved', $e->getMessage());
        }
        try {
            $this->client->add($topic, 1, ['replace' => true]);
            $this->fail('an upsert without id was accepted');
        } catch (BadRequestException $e) {
            $this->assertStringContainsString("'replace'", $e->getMessage());
        }
        $other = self::unique('upsert');
        $results = $this->client->addMany([
            ['topic' => $topic, 'body' => 5, 'id' => $other, 'replace' => true],
            ['topic' => $topic, 'body' => 6],
        ]);
        $this->assertSame([true, false], [$results[0]['success'], $results[0]['replaced']]);
        $this->assertArrayNotHasKey('replaced', $results[1]);
        $this->client->finish($id);
        $this->client->delete($other);
    }

    public function testSchedules(): void
    {
        $id = str_replace('-', '_', self::unique('sch'));
        $topic = self::unique('scht');
        $r = $this->client->schedule($id, $topic, ['report' => true], ['cron' => '0 3 * * *', 'tz' => 'Asia/Shanghai'],
            ['ttr' => 30, 'backoff' => [60]]);
        $this->assertSame($id, $r['id']);
        $this->assertFalse($r['replaced']);
        $one = $this->client->schedules($id, 2);
        $this->assertCount(1, $one);
        $this->assertSame('0 3 * * *', $one[0]['cron']);
        $this->assertCount(2, $one[0]['upcoming']);
        $this->assertSame(19 * 3600000, $one[0]['upcoming'][0] % 86400000, '03:00 in UTC+8');
        $this->assertTrue($this->client->schedule($id, $topic, 1, ['every' => 60])['replaced']);
        // The server takes whole seconds: microtime(true)'s fraction is cut.
        $start = microtime(true) + 60;
        $r = $this->client->schedule($id, $topic, 1, ['every' => 60, 'start' => $start, 'end' => $start + 3600]);
        $this->assertSame((int) floor($start) * 1000, $r['next']);
        $r = $this->client->schedule($id, $topic, 1, ['every' => 60, 'start' => new \DateTimeImmutable('@' . (int) $start)]);
        $this->assertSame((int) floor($start) * 1000, $r['next']);
        $this->client->unschedule($id);
        $this->expectException(NotFoundException::class);
        $this->client->unschedule($id);
    }

    public function testAddWithoutIdGetsAServerId(): void
    {
        $topic = self::unique();
        $id = $this->client->add($topic, 'x');
        $this->assertMatchesRegularExpression('/^[0-9a-f]{24}$/', $id);
        $this->assertSame($id, $this->client->pop($topic)->getId());
        $this->client->delete($id);
    }

    public function testDelayAndAt(): void
    {
        $topic = self::unique();
        $later = $this->client->add($topic, 'later', ['delay' => 30]);
        $info = $this->client->get($later);
        $this->assertSame('delay', $info['state']);
        $nowMs = microtime(true) * 1000;
        $this->assertEqualsWithDelta($nowMs + 30000, $info['due'], 2000);

        $past = $this->client->add($topic, 'past', ['at' => time() - 10]);
        $this->assertSame('ready', $this->client->get($past)['state']);
        $future = $this->client->add($topic, 'future', ['at' => time() + 100.5]);
        $this->assertEqualsWithDelta((time() + 100.5) * 1000, $this->client->get($future)['due'], 2000);

        // null options count as not given
        $plain = $this->client->add($topic, 'plain', ['id' => null, 'delay' => null, 'ttr' => null]);
        $this->assertSame(60, $this->client->get($plain)['ttr']);
        $this->assertSame([true, true, true, true], array_column(
            $this->client->deleteMany([$later, $past, $future, $plain]),
            'success'
        ));
    }

    public function testGet(): void
    {
        $topic = self::unique();
        $id = self::unique('job');
        $before = (int) floor(microtime(true) * 1000) - 1000;
        $this->client->add($topic, ['a' => [1, 2]], ['id' => $id, 'ttr' => 5, 'retries' => 3]);
        $info = $this->client->get($id);
        $this->assertSame($id, $info['id']);
        $this->assertSame($topic, $info['topic']);
        $this->assertSame('ready', $info['state']);
        $this->assertSame(['a' => [1, 2]], $info['value']);
        $this->assertNull($info['due']);
        $this->assertSame(5, $info['ttr']);
        $this->assertSame(0, $info['attempts']);
        $this->assertSame(3, $info['retries']);
        $this->assertGreaterThanOrEqual($before, $info['created']);
        $this->assertArrayNotHasKey('success', $info);

        $this->client->pop($topic);
        $info = $this->client->get($id);
        $this->assertSame('reserved', $info['state']);
        $this->assertSame(1, $info['attempts']);
        $this->assertEqualsWithDelta(microtime(true) * 1000 + 5000, $info['due'], 2000);
        $this->client->finish($id);

        $this->expectException(NotFoundException::class);
        $this->client->get($id);
    }

    /** @return array<string,array{0:mixed}> */
    public function bodies(): array
    {
        return [
            'string' => ['hello'],
            'empty string' => [''],
            'string that looks like a JSON object' => ['{"a":1}'],
            'string that looks like a number' => ['42'],
            'string "null"' => ['null'],
            'unicode string' => ["h\u{e9}llo \u{2713} \u{1F600}"],
            'string with slashes and quotes' => ["a/b\\c \"q\" \n\t"],
            'int' => [42],
            'negative int' => [-7],
            'zero' => [0],
            'float' => [1.5],
            'float with zero fraction' => [2.0],
            'true' => [true],
            'false' => [false],
            'null' => [null],
            'empty array' => [[]],
            'list' => [[1, 'two', 3.25, null, [true]]],
            'object' => [['order' => 42, 'items' => [['sku' => 'A-1', 'qty' => 2]], 'note' => "\u{fc}"]],
        ];
    }

    /**
     * @dataProvider bodies
     * @param mixed $body
     */
    public function testBodyRoundTrip($body): void
    {
        $topic = self::unique('body');
        $id = $this->client->add($topic, $body);
        $this->assertSame($body, $this->client->get($id)['value']);
        $job = $this->client->pop($topic);
        $this->assertNotNull($job);
        $this->assertSame($body, $job->getValue());
        $this->client->finish($id);
    }

    public function testBodiesInBatchAndPopMany(): void
    {
        $topic = self::unique('body');
        $bodies = array_column($this->bodies(), 0);
        $jobs = [];
        foreach ($bodies as $i => $body) {
            $jobs[] = ['topic' => $topic, 'id' => "$topic-$i", 'body' => $body];
        }
        $results = $this->client->addMany($jobs);
        $this->assertCount(count($bodies), $results);
        $popped = $this->client->popMany($topic, 100);
        $this->assertCount(count($bodies), $popped);
        $byId = [];
        foreach ($popped as $job) {
            $byId[$job->getId()] = $job->getValue();
        }
        foreach ($bodies as $i => $body) {
            $this->assertSame($body, $byId["$topic-$i"], "body $i");
        }
        $this->client->finishMany(array_keys($byId));
    }

    public function testObjectsWithAssocFalse(): void
    {
        $client = self::newClient(['assoc' => false]);
        $topic = self::unique('obj');
        $client->add($topic, new \stdClass(), ['id' => "$topic-1"]);
        $client->add($topic, [], ['id' => "$topic-2"]);
        $client->add($topic, ['a' => ['b' => 1], 'c' => [1, 2]], ['id' => "$topic-3"]);
        $client->add($topic, 'text', ['id' => "$topic-4"]);

        $this->assertEquals(new \stdClass(), $client->pop($topic)->getValue());
        $this->assertSame([], $client->pop($topic)->getValue());
        $jobs = $client->popMany($topic, 10);
        $this->assertCount(2, $jobs);
        $value = $jobs[0]->getValue();
        $this->assertInstanceOf(\stdClass::class, $value);
        $this->assertInstanceOf(\stdClass::class, $value->a);
        $this->assertSame(1, $value->a->b);
        $this->assertSame([1, 2], $value->c);
        $this->assertSame('text', $jobs[1]->getValue());
        $this->assertInstanceOf(\stdClass::class, $client->get("$topic-3")['value']);

        // the default decodes objects as arrays: {} comes back as []
        $this->assertSame([], $this->client->get("$topic-1")['value']);
        $client->deleteMany(["$topic-1", "$topic-2", "$topic-3", "$topic-4"]);
    }

    public function testAddManyResultsInOrder(): void
    {
        $topic = self::unique();
        $a = self::unique('a');
        $b = self::unique('b');
        $this->client->add($topic, 'first', ['id' => $b]);
        $results = $this->client->addMany([
            ['topic' => $topic, 'id' => $a, 'body' => 'a', 'delay' => 0, 'ttr' => 10],
            ['topic' => $topic, 'id' => $b, 'body' => 'b again'],
            ['topic' => $topic, 'body' => ['c' => 1], 'delay' => 60, 'retries' => 2],
        ]);
        $this->assertCount(3, $results);
        $this->assertSame(['id' => $a, 'success' => true], $results[0]);
        $this->assertSame($b, $results[1]['id']);
        $this->assertFalse($results[1]['success']);
        $this->assertSame('conflict', $results[1]['code']);
        $this->assertIsString($results[1]['error']);
        $this->assertTrue($results[2]['success']);
        $this->assertSame('delay', $this->client->get($results[2]['id'])['state']);
        $this->assertSame(2, $this->client->get($results[2]['id'])['retries']);
        // the existing job is untouched
        $this->assertSame('first', $this->client->get($b)['value']);
        $this->client->deleteMany([$a, $b, $results[2]['id']]);
    }

    public function testFinishManyAndDeleteMany(): void
    {
        $topic = self::unique();
        $ids = [];
        foreach (range(1, 4) as $i) {
            $ids[] = $this->client->add($topic, $i);
        }
        $missing = self::unique('missing');
        $results = $this->client->finishMany([$ids[0], $missing, $ids[1]]);
        $this->assertSame(['id' => $ids[0], 'success' => true], $results[0]);
        $this->assertSame($missing, $results[1]['id']);
        $this->assertFalse($results[1]['success']);
        $this->assertSame('not_found', $results[1]['code']);
        $this->assertSame(['id' => $ids[1], 'success' => true], $results[2]);

        $results = $this->client->deleteMany([$ids[2], $ids[3], $ids[0]]);
        $this->assertSame([true, true, false], array_column($results, 'success'));
        $this->assertSame('not_found', $results[2]['code']);

        $stats = $this->client->stats($topic)['topics'][$topic];
        $this->assertSame(2, $stats['finished']);
        $this->assertSame(2, $stats['deleted']);
        $this->assertSame(0, $stats['ready']);
    }

    public function testDeleteSingle(): void
    {
        $topic = self::unique();
        $id = $this->client->add($topic, 'x', ['delay' => 100]);
        $this->client->delete($id);
        $this->assertSame(1, $this->client->stats($topic)['topics'][$topic]['deleted']);
        $this->expectException(NotFoundException::class);
        $this->client->delete($id);
    }

    public function testPopSeveralTopicsInOrder(): void
    {
        $low = self::unique('low');
        $high = self::unique('high');
        $this->client->add($low, 'low-1');
        $this->client->add($high, 'high-1');
        $this->client->add($low, 'low-2');

        $this->assertSame('high-1', $this->client->pop([$high, $low])->getValue());
        $this->assertSame('low-1', $this->client->pop("$high,$low")->getValue());
        $job = $this->client->pop([$high, $low], 0.5);
        $this->assertSame($low, $job->getTopic());
        $this->assertSame('low-2', $job->getValue());
        $this->assertNull($this->client->pop([$high, $low]));
    }

    public function testPopMany(): void
    {
        $a = self::unique('a');
        $b = self::unique('b');
        $this->assertSame([], $this->client->popMany([$a, $b], 10));
        foreach (range(1, 3) as $i) {
            $this->client->add($a, "a$i");
            $this->client->add($b, "b$i");
        }
        $jobs = $this->client->popMany([$a, $b], 4);
        $this->assertContainsOnlyInstancesOf(Job::class, $jobs);
        $this->assertSame(['a1', 'a2', 'a3', 'b1'], array_map(static function (Job $j) {
            return $j->getValue();
        }, $jobs));
        $one = $this->client->popMany($b, 1, 1.0);
        $this->assertCount(1, $one);
        $this->assertSame('b2', $one[0]->getValue());
        $ids = array_map(static function (Job $j): string {
            return $j->getId();
        }, array_merge($jobs, $one));
        $this->assertSame([true, true, true, true, true], array_column($this->client->finishMany($ids), 'success'));
    }

    public function testFinishAndPop(): void
    {
        $topic = self::unique('fap');
        $a = $this->client->add($topic, 'a');
        $b = $this->client->add($topic, 'b');
        $d = $this->client->add($topic, 'd');
        $this->assertSame($a, $this->client->pop($topic)->getId());

        // the previous job is finished and the next one comes, in one request
        $job = $this->client->pop($topic, 0, $a, $finished);
        $this->assertSame($b, $job->getId());
        $this->assertSame([['id' => $a, 'success' => true]], $finished);
        $this->assertSame('reserved', $this->client->get($b)['state']);
        try {
            $this->client->get($a);
            $this->fail("$a was not finished");
        } catch (NotFoundException $e) {
        }

        // popMany: an entry per id in request order, a known and an unknown one
        $unknown = self::unique('nope');
        $jobs = $this->client->popMany([$topic], 5, 0, [$b, $unknown], $finished);
        $this->assertSame([$d], array_map(static function (Job $j): string {
            return $j->getId();
        }, $jobs));
        $this->assertCount(2, $finished);
        $this->assertSame(['id' => $b, 'success' => true], $finished[0]);
        $this->assertSame([$unknown, false, 'not_found'], [$finished[1]['id'], $finished[1]['success'], $finished[1]['code']]);
        $this->assertIsString($finished[1]['error']);

        // nothing left: an empty pop still answers the finishes
        $this->assertNull($this->client->pop($topic, 0, [$d], $finished));
        $this->assertSame([['id' => $d, 'success' => true]], $finished);
        $this->assertSame([], $this->client->popMany($topic, 2, 0, $d, $finished));
        $this->assertSame([[$d, 'not_found']], [[$finished[0]['id'], $finished[0]['code']]]);
        $stats = $this->client->stats($topic)['topics'][$topic];
        $this->assertSame([3, 3, 0], [$stats['popped'], $stats['finished'], $stats['reserved']]);
    }

    public function testFinishAndPopBadFinishDoesNothing(): void
    {
        $topic = self::unique('fap');
        $a = $this->client->add($topic, 'a');
        $b = $this->client->add($topic, 'b');
        $this->assertSame($a, $this->client->pop($topic)->getId());
        foreach (['bad id', [$a, 'bad id'], array_fill(0, 1001, 'x')] as $bad) {
            try {
                $this->client->pop($topic, 0, $bad);
                $this->fail('no exception for ' . json_encode($bad));
            } catch (BadRequestException $e) {
                $this->assertMatchesRegularExpression("/field 'finish(\\[\\d+\\])?'/", $e->getMessage());
            }
        }
        // neither finished nor popped
        $this->assertSame('reserved', $this->client->get($a)['state']);
        $this->assertSame('ready', $this->client->get($b)['state']);
        $this->client->deleteMany([$a, $b]);
    }

    public function testFinishAndPopWithALongPoll(): void
    {
        $topic = self::unique('fap');
        $a = $this->client->add($topic, 'a');
        $this->assertSame($a, $this->client->pop($topic)->getId());
        // a job added meanwhile wakes it, and the answer has the finish
        $id = self::unique('wake');
        [$proc, , $err] = self::spawnPhp(__DIR__ . '/fixtures/add_later.php', [
            self::url(), (string) self::token(), $topic, $id, '0.5',
        ]);
        $t = microtime(true);
        $job = $this->client->pop($topic, 10, $a, $finished);
        $elapsed = microtime(true) - $t;
        $this->assertSame(0, self::waitExit($proc, 5), (string) stream_get_contents($err));
        proc_close($proc);
        $this->assertNotNull($job, 'the long-poll returned empty');
        $this->assertSame($id, $job->getId());
        $this->assertSame([['id' => $a, 'success' => true]], $finished);
        $this->assertLessThan(3.0, $elapsed);
        // a long-poll that times out answers the finishes too
        $t = microtime(true);
        $this->assertSame([], $this->client->popMany($topic, 3, 0.3, $id, $finished));
        $this->assertGreaterThanOrEqual(0.25, microtime(true) - $t);
        $this->assertSame([['id' => $id, 'success' => true]], $finished);
    }

    public function testLongPollTimesOutEmpty(): void
    {
        $topic = self::unique('empty');
        // A client timeout shorter than the long-poll: the long-poll time is added to it.
        $client = self::newClient(['timeout' => 0.5]);
        $t = microtime(true);
        $this->assertNull($client->pop($topic, 1.5));
        $elapsed = microtime(true) - $t;
        $this->assertGreaterThanOrEqual(1.4, $elapsed);
        $this->assertLessThan(3.0, $elapsed);
        $this->assertSame([], $client->popMany($topic, 5, 0.3));
    }

    public function testLongPollWakesUpOnDelayedJob(): void
    {
        $topic = self::unique('wake');
        $id = $this->client->add($topic, 'soon', ['delay' => 0.5]);
        $t = microtime(true);
        $job = $this->client->pop($topic, 10);
        $elapsed = microtime(true) - $t;
        $this->assertNotNull($job);
        $this->assertSame($id, $job->getId());
        $this->assertGreaterThanOrEqual(0.4, $elapsed, 'popped before its delay');
        $this->assertLessThan(3.0, $elapsed, 'the long-poll did not wake up promptly');
        $this->client->finish($id);
    }

    public function testLongPollWakesUpOnAddFromAnotherProcess(): void
    {
        $topic = self::unique('wake');
        $id = self::unique('wake');
        [$proc, $out, $err] = self::spawnPhp(__DIR__ . '/fixtures/add_later.php', [
            self::url(), (string) self::token(), $topic, $id, '0.5',
        ]);
        $t = microtime(true);
        $job = $this->client->pop($topic, 10);
        $elapsed = microtime(true) - $t;
        $this->assertSame(0, self::waitExit($proc, 5), (string) stream_get_contents($err));
        proc_close($proc);
        $this->assertNotNull($job, 'the long-poll returned empty');
        $this->assertSame($id, $job->getId());
        $this->assertSame('woke', $job->getValue());
        $this->assertLessThan(3.0, $elapsed);
        $this->client->finish($id);
    }

    public function testTtrRedelivery(): void
    {
        $topic = self::unique('ttr');
        $id = $this->client->add($topic, 'x', ['ttr' => 0.5]);
        $first = $this->client->pop($topic);
        $this->assertSame(1, $first->getAttempts());
        $this->assertSame(0.5, $first->getTtr());
        $this->assertNull($this->client->pop($topic), 'delivered twice within one TTR');
        $again = $this->client->pop($topic, 5);
        $this->assertNotNull($again, 'not delivered again after its TTR');
        $this->assertSame($id, $again->getId());
        $this->assertSame(2, $again->getAttempts());
        $this->client->finish($id);
        $this->assertSame(1, $this->client->stats($topic)['topics'][$topic]['redelivered']);
    }

    public function testTouch(): void
    {
        $topic = self::unique();
        $id = $this->client->add($topic, 'x', ['ttr' => 20]);
        $this->client->pop($topic);
        $due = $this->client->touch($id);
        $this->assertEqualsWithDelta(microtime(true) * 1000 + 20000, $due, 2000);
        $this->assertSame($due, $this->client->get($id)['due']);
        $this->client->finish($id);
    }

    public function testReleaseBuryKick(): void
    {
        $topic = self::unique();
        $id = $this->client->add($topic, 'x');
        $this->client->pop($topic);
        $this->assertSame('delay', $this->client->release($id, 30));
        $info = $this->client->get($id);
        $this->assertSame('delay', $info['state']);
        $this->assertEqualsWithDelta(microtime(true) * 1000 + 30000, $info['due'], 2000);

        $id2 = $this->client->add($topic, 'y');
        $this->client->pop($topic);
        $this->assertSame('ready', $this->client->release($id2));
        $job = $this->client->pop($topic);
        $this->assertSame($id2, $job->getId());
        $this->assertSame(2, $job->getAttempts());

        $this->client->bury($id2);
        $this->assertSame('buried', $this->client->get($id2)['state']);
        $this->assertNull($this->client->pop($topic), 'pop returned a buried job');
        $this->assertSame(1, $this->client->kick($topic, 10));
        $this->assertSame(0, $this->client->kick($topic));
        $this->assertSame($id2, $this->client->pop($topic)->getId());
        $this->client->finishMany([$id, $id2]);
    }

    public function testJobsListing(): void
    {
        $topic = self::unique('list');
        $ids = [];
        foreach (range(0, 4) as $i) {
            $ids[] = $this->client->add($topic, ['n' => $i], ['id' => "$topic-$i", 'delay' => 100 + $i, 'ttr' => 7]);
        }
        $page = $this->client->jobs($topic, 'delay', 2);
        $this->assertSame(array_slice($ids, 0, 2), array_column($page['jobs'], 'id'));
        $first = $page['jobs'][0];
        $this->assertSame([$topic, 'delay', ['n' => 0], 7], [$first['topic'], $first['state'], $first['value'], $first['ttr']]);
        $this->assertArrayNotHasKey('success', $first);
        $this->assertEqualsWithDelta(microtime(true) * 1000 + 101000, $page['jobs'][1]['due'], 5000);
        $this->assertIsString($page['cursor']);
        $page = $this->client->jobs($topic, 'delay', 2, $page['cursor']);
        $this->assertSame(array_slice($ids, 2, 2), array_column($page['jobs'], 'id'));
        $page = $this->client->jobs($topic, 'delay', 2, $page['cursor']);
        $this->assertSame([array_slice($ids, 4), null], [array_column($page['jobs'], 'id'), $page['cursor']]);
        $this->assertSame($ids, array_column($this->client->jobs($topic, 'delay')['jobs'], 'id'));
        $this->assertSame(['jobs' => [], 'cursor' => null], $this->client->jobs($topic, 'ready'));
        try {
            $this->client->jobs($topic, 'done');
            $this->fail('no exception for state done');
        } catch (BadRequestException $e) {
            $this->assertStringContainsString('state', $e->getMessage());
        }
        $this->client->deleteMany($ids);
    }

    public function testReschedule(): void
    {
        $topic = self::unique('resched');
        $id = $this->client->add($topic, 'x', ['delay' => 100]);
        $r = $this->client->reschedule($id, ['delay' => 3600]);
        $this->assertSame([$id, 'delay'], [$r['id'], $r['state']]);
        $this->assertEqualsWithDelta(microtime(true) * 1000 + 3600000, $r['due'], 5000);
        $this->assertSame($r['due'], $this->client->get($id)['due']);
        $at = time() + 60;
        $this->assertEqualsWithDelta($at * 1000, $this->client->reschedule($id, ['at' => $at])['due'], 1000);
        $this->assertSame(['id' => $id, 'state' => 'ready', 'due' => null], $this->client->reschedule($id, ['delay' => 0]));
        $this->assertSame($id, $this->client->pop($topic)->getId());
        try {
            $this->client->reschedule($id, ['delay' => 5]);
            $this->fail('a reserved job was rescheduled');
        } catch (ConflictException $e) {
        }
        $this->client->bury($id);
        $this->assertSame('ready', $this->client->reschedule($id, ['at' => 0])['state'], 'a buried job too');
        foreach ([[], ['delay' => 1, 'at' => 5], ['dealy' => 1]] as $bad) {
            try {
                $this->client->reschedule($id, $bad);
                $this->fail('no exception for ' . json_encode($bad));
            } catch (\InvalidArgumentException $e) {
            }
        }
        $this->client->delete($id);
        $this->expectException(NotFoundException::class);
        $this->client->reschedule($id, ['delay' => 1]);
    }

    public function testPurge(): void
    {
        $topic = self::unique('purge');
        $other = self::unique('purgeother');
        $delayed = [];
        for ($i = 0; $i < 3; $i++) {
            $delayed[] = $this->client->add($topic, $i, ['delay' => 600]);
        }
        $ready = $this->client->add($topic, 'now');
        $kept = $this->client->add($other, 'x', ['delay' => 600]);
        $this->assertSame(3, $this->client->purge($topic, 'delay'));
        $this->assertSame('ready', $this->client->get($ready)['state']);
        $this->assertSame(1, $this->client->purge($topic));
        $this->assertSame(0, $this->client->purge($topic));
        $this->assertSame(4, $this->client->stats($topic)['topics'][$topic]['deleted']);
        $this->assertSame('delay', $this->client->get($kept)['state']);
        try {
            $this->client->purge($topic, 'done');
            $this->fail('a bad state was accepted');
        } catch (BadRequestException $e) {
            $this->assertStringContainsString("'state'", $e->getMessage());
        }
        $this->client->delete($kept);
        $this->expectException(NotFoundException::class);
        $this->client->get($delayed[0]);
    }

    public function testPauseResume(): void
    {
        $topic = self::unique('pause');
        $this->client->pause($topic);
        $this->client->pause($topic);  // idempotent
        $id = $this->client->add($topic, 'x');
        $this->assertTrue($this->client->stats($topic)['topics'][$topic]['paused']);
        $this->assertNull($this->client->pop($topic, 0.3), 'popped from a paused topic');
        $this->assertSame('ready', $this->client->get($id)['state']);
        $this->client->resume($topic);
        $this->assertFalse($this->client->stats($topic)['topics'][$topic]['paused']);
        $this->assertSame($id, $this->client->pop($topic)->getId());
        $this->client->resume($topic);
        $this->client->finish($id);
    }

    public function testReleaseAfterLastRetryBuries(): void
    {
        $topic = self::unique();
        $id = $this->client->add($topic, 'x', ['retries' => 0]);
        $this->client->pop($topic);
        $this->assertSame('buried', $this->client->release($id, 0));
        $this->assertSame(1, $this->client->stats($topic)['topics'][$topic]['buried']);
        $this->client->finish($id);
    }

    public function testStatsAllTopics(): void
    {
        $topic = self::unique();
        $this->client->add($topic, 'x', ['delay' => 100]);
        $stats = $this->client->stats();
        $this->assertArrayHasKey($topic, $stats['topics']);
        $this->assertSame(1, $stats['topics'][$topic]['delay']);
        $this->assertGreaterThanOrEqual(1, $stats['total']['delay']);
        $this->assertArrayNotHasKey('success', $stats);
        $fresh = self::unique('never');
        $this->assertSame(0, $this->client->stats($fresh)['topics'][$fresh]['added']);
    }

    public function testHealthAndMetrics(): void
    {
        $this->assertSame('ok', $this->client->health()['redis']);
        $topic = self::unique('m');
        $this->client->add($topic, 1);
        $metrics = $this->client->metrics();
        $this->assertStringContainsString('# TYPE delayq_jobs gauge', $metrics);
        $this->assertStringContainsString("delayq_jobs{topic=\"$topic\",state=\"ready\"} 1", $metrics);
        $this->assertMatchesRegularExpression('/^delayq_requests_total\{command="add",code="ok"\} \d+$/m', $metrics);
        $this->client->delete($this->client->pop($topic)->getId());
    }

    public function testKeepAliveReusesOneConnection(): void
    {
        $client = self::newClient();
        $this->assertNull($client->getLastInfo());
        $client->stats();
        $this->assertSame(1, $client->getLastInfo(CURLINFO_NUM_CONNECTS), 'the first request connects');
        $topic = self::unique('ka');
        $calls = [
            'stats' => function () use ($client): void {
                $client->stats();
            },
            'add' => function () use ($client, $topic): void {
                $client->add($topic, 'x', ['id' => "$topic-1"]);
            },
            'pop long-poll' => function () use ($client, $topic): void {
                $client->pop($topic, 1);
            },
            'empty long-poll' => function () use ($client, $topic): void {
                $client->pop($topic, 0.2);
            },
            'an error answer (404)' => function () use ($client): void {
                try {
                    $client->finish('no-such-job');
                } catch (NotFoundException $e) {
                }
            },
            'after an error' => function () use ($client, $topic): void {
                $client->finish("$topic-1");
            },
            'health (GET)' => function () use ($client): void {
                $client->health();
            },
            'POST after GET' => function () use ($client): void {
                $client->stats();
            },
        ];
        foreach ($calls as $what => $call) {
            $call();
            $this->assertSame(0, $client->getLastInfo(CURLINFO_NUM_CONNECTS), "$what opened a new connection");
        }
        $client->close();
        $client->stats();
        $this->assertSame(1, $client->getLastInfo(CURLINFO_NUM_CONNECTS), 'close() drops the connection');
    }

    public function testCommandFormThroughCall(): void
    {
        $topic = self::unique();
        $answer = $this->client->call('add', ['topic' => $topic, 'body' => 'raw', 'TTR' => 7]);
        $this->assertTrue($answer['success']);
        $this->assertSame(7, $this->client->get($answer['id'])['ttr']);
        $this->client->delete($answer['id']);
    }

    public function testUrlWithTrailingSlash(): void
    {
        $client = new Client(self::url() . '/', ['token' => self::token()]);
        $this->assertSame(rtrim(self::url(), '/'), $client->getUrl());
        $this->assertSame('ok', $client->health()['redis']);
    }
}
