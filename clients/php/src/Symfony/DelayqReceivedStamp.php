<?php

declare(strict_types=1);

namespace Delayq\Symfony;

use Symfony\Component\Messenger\Stamp\NonSendableStampInterface;

/** The delayq job a received message came from (not sent along when the message is sent again). */
final class DelayqReceivedStamp implements NonSendableStampInterface
{
    /** @var string */
    private $id;

    public function __construct(string $id)
    {
        $this->id = $id;
    }

    public function getId(): string
    {
        return $this->id;
    }
}
