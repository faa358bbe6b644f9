<?php

declare(strict_types=1);

namespace Delayq;

/**
 * 503 unavailable: the server could not reach Redis (or Redis is read-only
 * or loading). The request had no effect: it is safe to retry.
 */
class UnavailableException extends ServerException
{
}
