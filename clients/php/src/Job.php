<?php

declare(strict_types=1);

namespace Delayq;

/**
 * A job handed out by pop: it is now reserved by this consumer, which must
 * finish (or delete) it within getTtr() seconds of the pop, or touch it to
 * get more time; otherwise it is delivered again.
 */
final class Job
{
    /** @var string */
    private $id;
    /** @var string */
    private $topic;
    /** @var mixed */
    private $value;
    /** @var int */
    private $attempts;
    /** @var float */
    private $ttr;
    /** @var string|null */
    private $key;
    /** @var string|null */
    private $traceparent;
    /** @var string|null */
    private $tracestate;

    /**
     * @param mixed $value the job body, decoded: a string stays a string
     */
    public function __construct(
        string $id,
        string $topic,
        $value,
        int $attempts,
        float $ttr,
        ?string $key = null,
        ?string $traceparent = null,
        ?string $tracestate = null
    ) {
        $this->id = $id;
        $this->topic = $topic;
        $this->value = $value;
        $this->attempts = $attempts;
        $this->ttr = $ttr;
        $this->key = $key;
        $this->traceparent = $traceparent;
        $this->tracestate = $tracestate;
    }

    /**
     * From one job of a pop answer
     * ({"id":..,"topic":..,"value":..,"attempts":..,"ttr":..}).
     *
     * @param array<string,mixed> $answer
     */
    public static function fromArray(array $answer): self
    {
        foreach (['id', 'topic', 'attempts', 'ttr'] as $field) {
            if (!isset($answer[$field])) {
                throw new ServerException(
                    "the server's pop answer has no '$field'",
                    'server_error',
                    200,
                    $answer
                );
            }
        }
        return new self(
            (string) $answer['id'],
            (string) $answer['topic'],
            array_key_exists('value', $answer) ? $answer['value'] : null,
            (int) $answer['attempts'],
            (float) $answer['ttr'],
            isset($answer['key']) ? (string) $answer['key'] : null,
            isset($answer['traceparent']) ? (string) $answer['traceparent'] : null,
            isset($answer['tracestate']) ? (string) $answer['tracestate'] : null
        );
    }

    public function getId(): string
    {
        return $this->id;
    }

    public function getTopic(): string
    {
        return $this->topic;
    }

    /**
     * The body as the producer gave it: a string, or the decoded JSON value
     * (an array for a JSON object or array, unless the Client was made with
     * 'assoc' => false, which gives stdClass objects).
     *
     * @return mixed
     */
    public function getValue()
    {
        return $this->value;
    }

    /** Deliveries so far, this one included (1 on the first delivery). */
    public function getAttempts(): int
    {
        return $this->attempts;
    }

    /** Seconds the consumer has, from the pop, to finish the job. */
    public function getTtr(): float
    {
        return $this->ttr;
    }

    /** The job's grouping key, or null for a job added without one. */
    public function getKey(): ?string
    {
        return $this->key;
    }

    /**
     * The W3C traceparent the job was added with (so the consumer's span can
     * join the producer's trace), or null for none.
     */
    public function getTraceparent(): ?string
    {
        return $this->traceparent;
    }

    /** The W3C tracestate the job was added with, or null for none. */
    public function getTracestate(): ?string
    {
        return $this->tracestate;
    }

    /**
     * The pop answer's fields; 'key', 'traceparent' and 'tracestate' only
     * for a job that has them.
     *
     * @return array{id:string,topic:string,value:mixed,attempts:int,ttr:float,key?:string,traceparent?:string,tracestate?:string}
     */
    public function toArray(): array
    {
        $out = [
            'id' => $this->id,
            'topic' => $this->topic,
            'value' => $this->value,
            'attempts' => $this->attempts,
            'ttr' => $this->ttr,
        ];
        $optional = [
            'key' => $this->key,
            'traceparent' => $this->traceparent,
            'tracestate' => $this->tracestate,
        ];
        foreach ($optional as $name => $v) {
            if ($v !== null) {
                $out[$name] = $v;
            }
        }
        return $out;
    }
}
