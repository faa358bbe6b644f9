<?php

declare(strict_types=1);

namespace Delayq;

/**
 * The client could not connect to the server (connection refused, host not
 * found, connect timeout): nothing was sent, so, like any
 * UnavailableException, the request had no effect and is safe to retry.
 * getErrorCode() is "unavailable", getHttpStatus() is 0 and getCurlErrno()
 * tells the cause.
 */
class ConnectionException extends UnavailableException
{
    /** @var int */
    private $curlErrno;

    public function __construct(string $message, int $curlErrno, ?\Throwable $previous = null)
    {
        parent::__construct($message, 'unavailable', 0, null, $previous);
        $this->curlErrno = $curlErrno;
    }

    /** libcurl's error number (CURLE_*), for example 7 for "could not connect". */
    public function getCurlErrno(): int
    {
        return $this->curlErrno;
    }
}
