<?php

declare(strict_types=1);

namespace Delayq;

/**
 * Base class of every error the client raises for a request that failed:
 * an error answer of the server (getErrorCode() is the protocol's "code",
 * getHttpStatus() the HTTP status) or a transport failure (HTTP status 0).
 *
 * bad_request 400  BadRequestException
 * unauthorized 401 UnauthorizedException
 * not_found 404    NotFoundException
 * conflict 409     ConflictException
 * too_large 413    TooLargeException
 * unavailable 503  UnavailableException (a ServerException): no effect, safe to retry
 * timeout 504      TimeoutException (a ServerException): outcome unknown
 * other 5xx        ServerException
 */
class DelayqException extends \RuntimeException
{
    /** @var string */
    private $errorCode;
    /** @var int */
    private $httpStatus;
    /** @var array<string,mixed>|null */
    private $response;

    /**
     * @param array<string,mixed>|null $response the decoded error answer, when there was one
     */
    public function __construct(
        string $message,
        string $errorCode,
        int $httpStatus,
        ?array $response = null,
        ?\Throwable $previous = null
    ) {
        parent::__construct($message, $httpStatus, $previous);
        $this->errorCode = $errorCode;
        $this->httpStatus = $httpStatus;
        $this->response = $response;
    }

    /** The protocol's error code: "bad_request", "not_found", "conflict", "unavailable", ... */
    public function getErrorCode(): string
    {
        return $this->errorCode;
    }

    /** The HTTP status of the answer; 0 when no answer was received. */
    public function getHttpStatus(): int
    {
        return $this->httpStatus;
    }

    /**
     * The decoded error answer ({"success":false,"error":..,"code":..}), or
     * null for a transport failure or an answer that was not JSON.
     *
     * @return array<string,mixed>|null
     */
    public function getResponse(): ?array
    {
        return $this->response;
    }
}
