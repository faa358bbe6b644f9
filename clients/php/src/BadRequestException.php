<?php

declare(strict_types=1);

namespace Delayq;

/**
 * 400 bad_request: the request is malformed (a field of the wrong type or
 * range, bad characters in a topic or id, unknown command). Nothing changed.
 */
class BadRequestException extends DelayqException
{
}
