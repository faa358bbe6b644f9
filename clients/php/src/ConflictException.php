<?php

declare(strict_types=1);

namespace Delayq;

/**
 * 409 conflict: add with an id that is live (the existing job is untouched),
 * or touch / release / bury on a job that is not reserved.
 */
class ConflictException extends DelayqException
{
}
