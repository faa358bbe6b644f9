<?php

declare(strict_types=1);

namespace Delayq;

/**
 * 413 too_large: a job body over the server's max_body (64 KiB by default)
 * or a request over 1 MiB. Nothing changed.
 */
class TooLargeException extends DelayqException
{
}
