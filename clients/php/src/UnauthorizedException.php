<?php

declare(strict_types=1);

namespace Delayq;

/**
 * 401 unauthorized: auth is enabled on the server and the bearer token is
 * missing, wrong or not allowed this topic or command. Nothing changed.
 */
class UnauthorizedException extends DelayqException
{
}
