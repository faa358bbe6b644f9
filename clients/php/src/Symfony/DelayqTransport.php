<?php

declare(strict_types=1);

namespace Delayq\Symfony;

use Delayq\Client;
use Delayq\DelayqException;
use Delayq\Heartbeat;
use Delayq\NotFoundException;
use Symfony\Component\Messenger\Envelope;
use Symfony\Component\Messenger\Exception\LogicException;
use Symfony\Component\Messenger\Exception\MessageDecodingFailedException;
use Symfony\Component\Messenger\Exception\TransportException;
use Symfony\Component\Messenger\Stamp\DelayStamp;
use Symfony\Component\Messenger\Stamp\TransportMessageIdStamp;
use Symfony\Component\Messenger\Transport\Receiver\ListableReceiverInterface;
use Symfony\Component\Messenger\Transport\Receiver\MessageCountAwareInterface;
use Symfony\Component\Messenger\Transport\Serialization\SerializerInterface;
use Symfony\Component\Messenger\Transport\TransportInterface;

/**
 * A Symfony Messenger transport on one delayq topic. A message is a delayq
 * job whose body is the serializer's encoded envelope ({"body": ..,
 * "headers": {..}}).
 *
 * - send: add; a DelayStamp becomes the job's delay.
 * - get: pop, long-polling up to `wait` seconds; from then until ack or
 *   reject, a Heartbeat touches the job every TTR/3, so a long handler
 *   keeps it.
 * - ack: finish.
 * - reject: delete. Messenger rejects a message after its retry listener
 *   has sent a copy for the retry, or its failure transport has taken it,
 *   so the rejected job is spent: burying it would keep a second copy that
 *   a kick would run again.
 * - a job whose body the serializer cannot decode is buried (and the
 *   error thrown): it is kept in delayq to be looked at, not lost.
 * - getMessageCount: the topic's delayed plus ready jobs (stats), the
 *   messages waiting for a worker.
 * - all / find (messenger:failed:show, :retry, :remove on a delayq failure
 *   transport): the same waiting messages, ready ones first (jobs), not
 *   taken; ack and reject work on them as on a message get() gave.
 */
class DelayqTransport implements TransportInterface, MessageCountAwareInterface, ListableReceiverInterface
{
    /** @var Client */
    private $client;
    /** @var callable():Client */
    private $clientFactory;
    /** @var SerializerInterface */
    private $serializer;
    /** @var string */
    private $topic;
    /** @var float */
    private $ttr;
    /** @var float */
    private $wait;
    /** @var bool */
    private $touch;
    /** @var array<string,Heartbeat> touching the jobs handed out, by job id */
    private $heartbeats = [];

    /**
     * @param callable():Client $clientFactory makes a Client like $client, for
     *        the child process that touches a job being handled
     */
    public function __construct(
        Client $client,
        callable $clientFactory,
        SerializerInterface $serializer,
        string $topic,
        float $ttr,
        float $wait,
        bool $touch
    ) {
        $this->client = $client;
        $this->clientFactory = $clientFactory;
        $this->serializer = $serializer;
        $this->topic = $topic;
        $this->ttr = $ttr;
        $this->wait = $wait;
        $this->touch = $touch;
    }

    public function send(Envelope $envelope): Envelope
    {
        $encoded = $this->serializer->encode($envelope);
        $options = ['ttr' => $this->ttr];
        $delay = $envelope->last(DelayStamp::class);
        if ($delay !== null && $delay->getDelay() > 0) {
            $options['delay'] = $delay->getDelay() / 1000;
        }
        $body = ['body' => $encoded['body'], 'headers' => (object) ($encoded['headers'] ?? [])];
        $id = $this->guard(function () use ($body, $options): string {
            return $this->client->add($this->topic, $body, $options);
        });
        return $envelope->with(new TransportMessageIdStamp($id));
    }

    /** The states of the messages all() lists, in its order. */
    private const LISTED_STATES = ['ready', 'delay'];

    /** @return list<Envelope> */
    public function get(): iterable
    {
        $job = $this->guard(function () {
            return $this->client->pop($this->topic, $this->wait);
        });
        if ($job === null) {
            return [];
        }
        try {
            $envelope = $this->decode($job->getId(), $job->getValue());
        } catch (MessageDecodingFailedException $e) {
            $this->call('bury', $job->getId());
            throw $e;
        }
        if ($this->touch) {
            $heartbeat = Heartbeat::start($this->clientFactory, $job->getId(), $job->getTtr());
            if ($heartbeat !== null) {
                $this->heartbeats[$job->getId()] = $heartbeat;
            }
        }
        return [$envelope->with(new DelayqReceivedStamp($job->getId()), new TransportMessageIdStamp($job->getId()))];
    }

    /** Finishes the message's job (one all() or find() gave too: finish takes a job in any state). */
    public function ack(Envelope $envelope): void
    {
        $this->call('finish', $this->jobId($envelope));
    }

    /**
     * Up to $limit (default 50, at most 1000) waiting messages, ready ones
     * in pop order, then delayed ones by due time; a job that is not a
     * Messenger message is left out.
     *
     * @return list<Envelope>
     */
    public function all(?int $limit = null): iterable
    {
        $limit = max(1, min($limit ?? 50, 1000));
        $envelopes = [];
        foreach (self::LISTED_STATES as $state) {
            $cursor = null;
            do {
                $page = $this->guard(function () use ($state, $limit, $cursor): array {
                    return $this->client->jobs($this->topic, $state, $limit, $cursor);
                });
                foreach ($page['jobs'] as $job) {
                    $envelope = $this->listed($job);
                    if ($envelope !== null) {
                        $envelopes[] = $envelope;
                    }
                    if (count($envelopes) === $limit) {
                        return $envelopes;
                    }
                }
                $cursor = $page['cursor'];
            } while ($cursor !== null);
        }
        return $envelopes;
    }

    /** The waiting message whose job id is $id, or null (no such job, not of this topic, taken). */
    public function find($id): ?Envelope
    {
        try {
            $job = $this->guard(function () use ($id): array {
                return $this->client->get((string) $id);
            });
        } catch (TransportException $e) {
            if ($e->getPrevious() instanceof NotFoundException) {
                return null;
            }
            throw $e;
        }
        if (($job['topic'] ?? null) !== $this->topic || !in_array($job['state'] ?? null, self::LISTED_STATES, true)) {
            return null;
        }
        return $this->listed($job);
    }

    /** Deletes the message's job (see the class comment for why not bury). */
    public function reject(Envelope $envelope): void
    {
        $this->call('delete', $this->jobId($envelope));
    }

    public function getMessageCount(): int
    {
        $counts = $this->guard(function (): array {
            return $this->client->stats($this->topic)['topics'][$this->topic] ?? [];
        });
        return (int) (($counts['delay'] ?? 0) + ($counts['ready'] ?? 0));
    }

    public function getClient(): Client
    {
        return $this->client;
    }

    private function jobId(Envelope $envelope): string
    {
        $stamp = $envelope->last(DelayqReceivedStamp::class);
        if ($stamp === null) {
            throw new LogicException('no DelayqReceivedStamp on the envelope: it was not received from delayq');
        }
        return $stamp->getId();
    }

    /**
     * The envelope of job $id's body ({"body", "headers"} as send() wrote it).
     *
     * @param mixed $value
     */
    private function decode(string $id, $value): Envelope
    {
        if (!is_array($value) || !isset($value['body']) || !is_string($value['body'])) {
            throw new MessageDecodingFailedException("delayq job '$id' is not a Messenger message (no string 'body')");
        }
        $headers = isset($value['headers']) && is_array($value['headers']) ? $value['headers'] : [];
        return $this->serializer->decode(['body' => $value['body'], 'headers' => $headers]);
    }

    /**
     * A listed job as get() stamps it, or null when it is not
     * a Messenger message.
     *
     * @param array<string,mixed> $job as Client::get() gives it
     */
    private function listed(array $job): ?Envelope
    {
        try {
            $envelope = $this->decode((string) $job['id'], $job['value'] ?? null);
        } catch (MessageDecodingFailedException $e) {
            return null;
        }
        return $envelope->with(new DelayqReceivedStamp($job['id']), new TransportMessageIdStamp($job['id']));
    }

    /**
     * $request(), a delayq error becoming Messenger's TransportException.
     *
     * @template T
     * @param callable():T $request
     * @return T
     */
    private function guard(callable $request)
    {
        try {
            return $request();
        } catch (DelayqException $e) {
            throw new TransportException('delayq: ' . $e->getMessage(), 0, $e);
        }
    }

    /**
     * Stops touching job $id, then finishes, deletes or buries it. A job
     * already gone (its TTR passed and another worker took it and is done)
     * is not an error: there is nothing left to do.
     */
    private function call(string $command, string $id): void
    {
        if (isset($this->heartbeats[$id])) {
            $this->heartbeats[$id]->stop();
            unset($this->heartbeats[$id]);
        }
        try {
            $this->client->$command($id);
        } catch (NotFoundException $e) {
            return;
        } catch (DelayqException $e) {
            throw new TransportException("delayq: $command of job '$id': " . $e->getMessage(), 0, $e);
        }
    }
}
