<?php
// Shared by producer.php, pay.php and worker.php: the autoloader, the delayq
// client, and a tiny "orders" store in a JSON file.
//
// Environment:
//   DELAYQ_URL         where delayq is served (default http://127.0.0.1:8080, as scripts/run)
//   DELAYQ_TOKEN       bearer token, when delayq's auth is on
//   ORDERS_FILE        the orders store (default orders.json next to this file)
//   ORDER_CLOSE_DELAY  seconds an order may stay unpaid (default 1800)

declare(strict_types=1);

// Composer's autoloader after `composer install` here; else the client's own.
if (is_file(__DIR__ . '/vendor/autoload.php')) {
    require __DIR__ . '/vendor/autoload.php';
} else {
    require __DIR__ . '/../../../clients/php/autoload.php';
}

function delayq_client(): Delayq\Client
{
    $url = getenv('DELAYQ_URL') ?: Delayq\Client::DEFAULT_URL;
    return new Delayq\Client($url, ['token' => getenv('DELAYQ_TOKEN') ?: null]);
}

function orders(): OrderStore
{
    return new OrderStore(getenv('ORDERS_FILE') ?: __DIR__ . '/orders.json');
}

/**
 * Orders and stock in one JSON file; every change runs under an exclusive
 * lock, so a payment and the close-order job never both win: whichever comes
 * first decides. (A real shop does the same with a database transaction or a
 * conditional UPDATE ... WHERE status = 'unpaid'.)
 */
final class OrderStore
{
    private const INITIAL_STOCK = ['tea' => 100, 'cake' => 20];

    /** @var string */
    private $file;

    public function __construct(string $file)
    {
        $this->file = $file;
    }

    /** A new unpaid order; its items are taken from stock. */
    public function create(string $sku, int $qty): array
    {
        return $this->change(static function (array &$db) use ($sku, $qty): array {
            if (!isset($db['stock'][$sku])) {
                throw new InvalidArgumentException("unknown product '$sku' (have: " . implode(', ', array_keys($db['stock'])) . ')');
            }
            if ($qty < 1 || $db['stock'][$sku] < $qty) {
                throw new RuntimeException("cannot order $qty x $sku: {$db['stock'][$sku]} in stock");
            }
            $id = $db['next_id']++;
            $db['stock'][$sku] -= $qty;
            $order = ['id' => $id, 'sku' => $sku, 'qty' => $qty, 'status' => 'unpaid', 'created' => time()];
            $db['orders'][(string) $id] = $order;
            return $order;
        });
    }

    /** Marks an unpaid order paid; returns its status afterwards ("paid" or "closed"). */
    public function pay(int $id): string
    {
        return $this->change(static function (array &$db) use ($id): string {
            $order = &self::find($db, $id);
            if ($order['status'] === 'unpaid') {
                $order['status'] = 'paid';
                $order['paid'] = time();
            }
            return $order['status'];
        });
    }

    /**
     * What the close-order job does: an order still unpaid is closed and its
     * items go back to stock. Returns what happened: "closed", or the status
     * that made it do nothing ("paid", "already closed", "missing").
     * Safe to run twice for one order (a job may be delivered more than once).
     */
    public function closeIfUnpaid(int $id): string
    {
        return $this->change(static function (array &$db) use ($id): string {
            if (!isset($db['orders'][(string) $id])) {
                return 'missing';
            }
            $order = &$db['orders'][(string) $id];
            if ($order['status'] === 'closed') {
                return 'already closed';
            }
            if ($order['status'] !== 'unpaid') {
                return $order['status'];
            }
            $order['status'] = 'closed';
            $order['closed'] = time();
            $db['stock'][$order['sku']] += $order['qty'];
            return 'closed';
        });
    }

    /** Drops an order that could not be scheduled for closing (its items go back). */
    public function cancel(int $id): void
    {
        $this->change(static function (array &$db) use ($id): void {
            $order = &self::find($db, $id);
            if ($order['status'] === 'unpaid') {
                $db['stock'][$order['sku']] += $order['qty'];
            }
            unset($db['orders'][(string) $id]);
        });
    }

    /** The whole store, read under a shared lock. */
    public function read(): array
    {
        return $this->locked(LOCK_SH, static function (array $db): array {
            return $db;
        });
    }

    private static function &find(array &$db, int $id): array
    {
        if (!isset($db['orders'][(string) $id])) {
            throw new RuntimeException("no order $id");
        }
        return $db['orders'][(string) $id];
    }

    /** Runs $fn on the store under an exclusive lock and saves what it changed. */
    private function change(callable $fn)
    {
        return $this->locked(LOCK_EX, $fn);
    }

    private function locked(int $lock, callable $fn)
    {
        $fh = fopen($this->file, 'c+');
        if ($fh === false) {
            throw new RuntimeException("cannot open {$this->file}");
        }
        try {
            flock($fh, $lock);
            $text = stream_get_contents($fh);
            $db = $text === '' ? ['next_id' => 1, 'stock' => self::INITIAL_STOCK, 'orders' => []]
                : json_decode($text, true, 512, JSON_THROW_ON_ERROR);
            $before = $db;
            $result = $fn($db);
            if ($lock === LOCK_EX && $db !== $before) {
                ftruncate($fh, 0);
                rewind($fh);
                $out = $db;
                $out['orders'] = (object) $db['orders'];  // {} even when empty
                fwrite($fh, json_encode($out, JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES) . "\n");
                fflush($fh);
            }
            return $result;
        } finally {
            flock($fh, LOCK_UN);
            fclose($fh);
        }
    }
}
