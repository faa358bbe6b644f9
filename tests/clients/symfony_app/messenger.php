<?php
// A Symfony Messenger application on Debian's Symfony packages and the
// delayq transport, for tests/clients/test_symfony.py. The DSN comes from
// DELAYQ_DSN; the handler appends one JSON line per message to JOB_LOG.
//
//   php messenger.php send NAME [BEHAVIOUR [DELAY_MS]]   prints the delayq job id
//   php messenger.php count                              prints the message count
//   php messenger.php consume LIMIT SECONDS [RETRIES [RETRY_DELAY_MS]]
//       a real Messenger Worker on the transport: stops after LIMIT messages
//       or SECONDS; with RETRIES, failed messages are retried that many
//       times RETRY_DELAY_MS apart (Messenger's retry listener)
//   php messenger.php failed:show [ID] [--max=N] | failed:retry [ID] --force
//       Messenger's own messenger:failed:show or :retry, the transport as
//       the failure transport
//
// BEHAVIOUR: ok, fail (the handler throws) or sleep:S (works S seconds).

declare(strict_types=1);

require '/usr/share/php/Symfony/Component/Messenger/autoload.php';
require '/usr/share/php/Symfony/Component/EventDispatcher/autoload.php';
require '/usr/share/php/Psr/Container/autoload.php';
require '/usr/share/php/Symfony/Component/Console/autoload.php';
require '/usr/share/php/Symfony/Component/VarDumper/autoload.php';
require '/usr/share/php/Symfony/Contracts/Service/autoload.php';
require __DIR__ . '/../../../clients/php/autoload.php';

use Delayq\Symfony\DelayqTransportFactory;
use Symfony\Component\Console\Application;
use Symfony\Component\Console\Input\ArgvInput;
use Symfony\Component\Messenger\Command\FailedMessagesRetryCommand;
use Symfony\Component\Messenger\Command\FailedMessagesShowCommand;
use Symfony\Contracts\Service\ServiceProviderInterface;
use Symfony\Component\EventDispatcher\EventDispatcher;
use Symfony\Component\Messenger\EventListener\SendFailedMessageForRetryListener;
use Symfony\Component\Messenger\EventListener\StopWorkerOnMessageLimitListener;
use Symfony\Component\Messenger\EventListener\StopWorkerOnTimeLimitListener;
use Symfony\Component\Messenger\Handler\HandlersLocator;
use Symfony\Component\Messenger\MessageBus;
use Symfony\Component\Messenger\Middleware\HandleMessageMiddleware;
use Symfony\Component\Messenger\Middleware\SendMessageMiddleware;
use Symfony\Component\Messenger\Retry\MultiplierRetryStrategy;
use Symfony\Component\Messenger\Stamp\DelayStamp;
use Symfony\Component\Messenger\Stamp\TransportMessageIdStamp;
use Symfony\Component\Messenger\Transport\Sender\SendersLocator;
use Symfony\Component\Messenger\Transport\Serialization\PhpSerializer;
use Symfony\Component\Messenger\Worker;

final class TestMessage
{
    /** @var string */
    public $name;
    /** @var string */
    public $behaviour;

    public function __construct(string $name, string $behaviour)
    {
        $this->name = $name;
        $this->behaviour = $behaviour;
    }
}

final class TestHandler
{
    public function __invoke(TestMessage $message): void
    {
        [$what, $arg] = array_pad(explode(':', $message->behaviour, 2), 2, null);
        if ($what === 'fail') {
            self::record($message, 'failed');
            throw new \RuntimeException("message {$message->name} fails on purpose");
        }
        if ($what === 'sleep') {
            usleep((int) ((float) $arg * 1e6));
        }
        self::record($message, 'handled');
    }

    private static function record(TestMessage $message, string $event): void
    {
        $line = json_encode(['name' => $message->name, 'event' => $event, 'time' => microtime(true)]) . "\n";
        file_put_contents((string) getenv('JOB_LOG'), $line, FILE_APPEND | LOCK_EX);
    }
}

/** The one-entry service locators Messenger's retry listener and failed commands ask for. */
final class OneService implements ServiceProviderInterface
{
    /** @var string */
    private $id;
    /** @var object */
    private $service;

    public function __construct(string $id, object $service)
    {
        $this->id = $id;
        $this->service = $service;
    }

    public function get(string $id)
    {
        if ($id !== $this->id) {
            throw new \OutOfBoundsException("no service '$id'");
        }
        return $this->service;
    }

    public function has(string $id): bool
    {
        return $id === $this->id;
    }

    public function getProvidedServices(): array
    {
        return [$this->id => get_class($this->service)];
    }
}

$argv = $_SERVER['argv'];
$dsn = (string) getenv('DELAYQ_DSN');
$transport = (new DelayqTransportFactory())->createTransport($dsn, [], new PhpSerializer());
$dispatcher = new EventDispatcher();
$bus = new MessageBus([
    new SendMessageMiddleware(new SendersLocator([TestMessage::class => ['delayq']], new OneService('delayq', $transport)), $dispatcher),
    new HandleMessageMiddleware(new HandlersLocator([TestMessage::class => [new TestHandler()]])),
]);

switch ($argv[1] ?? '') {
    case 'send':
        $stamps = isset($argv[4]) ? [new DelayStamp((int) $argv[4])] : [];
        $sent = $bus->dispatch(new TestMessage($argv[2], $argv[3] ?? 'ok'), $stamps);
        echo $sent->last(TransportMessageIdStamp::class)->getId(), "\n";
        break;
    case 'count':
        echo $transport->getMessageCount(), "\n";
        break;
    case 'consume':
        $dispatcher->addSubscriber(new StopWorkerOnMessageLimitListener((int) $argv[2]));
        $dispatcher->addSubscriber(new StopWorkerOnTimeLimitListener((int) $argv[3]));
        if (isset($argv[4])) {
            $dispatcher->addSubscriber(new SendFailedMessageForRetryListener(
                new OneService('delayq', $transport),
                new OneService('delayq', new MultiplierRetryStrategy((int) $argv[4], (int) ($argv[5] ?? 1000))),
                null,
                $dispatcher
            ));
        }
        $worker = new Worker(['delayq' => $transport], $bus, $dispatcher);
        $worker->run(['sleep' => 100000]);
        break;
    case 'failed:show':
    case 'failed:retry':
        $console = new Application();
        $console->setAutoExit(false);
        $console->add(new FailedMessagesShowCommand('delayq', new OneService('delayq', $transport)));
        $console->add(new FailedMessagesRetryCommand('delayq', new OneService('delayq', $transport), $bus, $dispatcher));
        exit($console->run(new ArgvInput(array_merge([$argv[0], 'messenger:' . $argv[1]], array_slice($argv, 2)))));
    default:
        fwrite(STDERR, "usage: messenger.php send NAME [BEHAVIOUR [DELAY_MS]] | count | consume LIMIT SECONDS [RETRIES [RETRY_DELAY_MS]] | failed:show [ID] | failed:retry [ID] --force\n");
        exit(2);
}
