<?php

declare(strict_types=1);

namespace Delayq\Laravel;

/** Some jobs of a bulk push were refused by delayq; the others were added. */
class BulkPushException extends \RuntimeException
{
    /** @var list<array{id:string,success:bool,code?:string,error?:string}> */
    private $refused;

    /**
     * @param list<array{id:string,success:bool,code?:string,error?:string}> $refused
     */
    public function __construct(array $refused, int $total)
    {
        $first = $refused[0];
        parent::__construct(sprintf(
            'delayq refused %d of %d jobs of a bulk push; the first: %s (%s)',
            count($refused),
            $total,
            $first['error'] ?? 'no reason given',
            $first['code'] ?? 'error'
        ));
        $this->refused = $refused;
    }

    /** @return list<array{id:string,success:bool,code?:string,error?:string}> */
    public function getRefused(): array
    {
        return $this->refused;
    }
}
