<?php

declare(strict_types=1);

namespace Delayq;

/**
 * The request was sent (or partly sent) but no complete answer came back: a
 * client-side timeout, a connection reset, an empty reply. Like any
 * TimeoutException, the outcome is unknown. getErrorCode() is
 * "timeout", getHttpStatus() is 0 and getCurlErrno() tells the cause.
 */
class ConnectionLostException extends TimeoutException
{
    /** @var int */
    private $curlErrno;

    public function __construct(string $message, int $curlErrno, ?\Throwable $previous = null)
    {
        parent::__construct($message, 'timeout', 0, null, $previous);
        $this->curlErrno = $curlErrno;
    }

    /** libcurl's error number (CURLE_*), for example 28 for a timeout. */
    public function getCurlErrno(): int
    {
        return $this->curlErrno;
    }
}
