<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Queue\InteractsWithQueue;

/**
 * The test's job: appends one JSON line per run to the file JOB_LOG names
 * (name, attempt, time, delayq id), after doing what $behaviour says:
 *   ok           nothing more
 *   fail         throws (Laravel releases it with --backoff, fails it after --tries)
 *   sleep:S      works S seconds first (longer than the TTR: touch must keep it)
 *   release:D    on its first attempt releases itself with a D-second delay instead
 */
class RecordJob implements ShouldQueue
{
    use InteractsWithQueue;
    use Queueable;

    /** @var string */
    public $name;
    /** @var string */
    public $behaviour;

    public function __construct(string $name, string $behaviour = 'ok')
    {
        $this->name = $name;
        $this->behaviour = $behaviour;
    }

    public function handle(): void
    {
        [$what, $arg] = array_pad(explode(':', $this->behaviour, 2), 2, null);
        $this->record($what === 'ok' ? 'ran' : 'start');
        if ($what === 'fail') {
            throw new \RuntimeException("job {$this->name} fails on purpose");
        }
        if ($what === 'sleep') {
            usleep((int) ((float) $arg * 1e6));
        }
        if ($what === 'release' && $this->attempts() === 1) {
            $this->release((int) $arg);
            return;
        }
        if ($what !== 'ok') {
            $this->record('ran');
        }
    }

    private function record(string $event): void
    {
        $line = json_encode([
            'name' => $this->name,
            'event' => $event,
            'attempts' => $this->attempts(),
            'id' => $this->job->getJobId(),
            'queue' => $this->job->getQueue(),
            'time' => microtime(true),
        ]) . "\n";
        file_put_contents((string) getenv('JOB_LOG'), $line, FILE_APPEND | LOCK_EX);
    }
}
