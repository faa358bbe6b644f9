<?php

declare(strict_types=1);

namespace Delayq;

/**
 * A server-side or transport failure (HTTP 5xx or no answer). The subclasses
 * tell whether the request had an effect: UnavailableException (it had none,
 * safe to retry) and TimeoutException (unknown). A plain ServerException is
 * any other 5xx (500 internal, an answer that is not the protocol's JSON).
 */
class ServerException extends DelayqException
{
}
