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
 */
class DelayqTransport implements TransportInterface, MessageCountAwareInterface
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
        try {
            $id = $this->client->add($this->topic, $body, $options);
        } catch (DelayqException $e) {
            throw new TransportException('delayq: ' . $e->getMessage(), 0, $e);
        }
        return $envelope->with(new TransportMessageIdStamp($id));
    }

    /** @return list<Envelope> */
    public function get(): iterable
    {
        try {
            $job = $this->client->pop($this->topic, $this->wait);
        } catch (DelayqException $e) {
            throw new TransportException('delayq: ' . $e->getMessage(), 0, $e);
        }
        if ($job === null) {
            return [];
        }
        $value = $job->getValue();
        try {
            if (!is_array($value) || !isset($value['body']) || !is_string($value['body'])) {
                throw new MessageDecodingFailedException(
                    "delayq job '{$job->getId()}' is not a Messenger message (no string 'body')"
                );
            }
            $headers = isset($value['headers']) && is_array($value['headers']) ? $value['headers'] : [];
            $envelope = $this->serializer->decode(['body' => $value['body'], 'headers' => $headers]);
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

    /** Finishes the message's job. */
    public function ack(Envelope $envelope): void
    {
        $this->call('finish', $this->jobId($envelope));
    }

    /** Deletes the message's job (see the class comment for why not bury). */
    public function reject(Envelope $envelope): void
    {
        $this->call('delete', $this->jobId($envelope));
    }

    public function getMessageCount(): int
    {
        try {
            $counts = $this->client->stats($this->topic)['topics'][$this->topic] ?? [];
        } catch (DelayqException $e) {
            throw new TransportException('delayq: ' . $e->getMessage(), 0, $e);
        }
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
