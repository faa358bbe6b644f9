<?php

declare(strict_types=1);

namespace Delayq;

/**
 * 504 timeout: Redis did not answer in time, or the connection was lost after
 * the request was sent. The request may or may not have taken effect. An add
 * retried with the same id is safe: ConflictException on the retry means the
 * first attempt took.
 */
class TimeoutException extends ServerException
{
}
