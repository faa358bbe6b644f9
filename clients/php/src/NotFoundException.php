<?php

declare(strict_types=1);

namespace Delayq;

/**
 * 404 not_found: no live job with that id (never added, or already
 * finished or deleted).
 */
class NotFoundException extends DelayqException
{
}
