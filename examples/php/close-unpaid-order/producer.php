<?php
// php producer.php [product] [quantity]
//
// What the shop runs in the web request that creates an order: store the
// order as unpaid, then schedule its closing with delayq: a job "close-order"
// with id "order-<n>", due in ORDER_CLOSE_DELAY seconds (default 1800: 30
// minutes). If the customer pays before that, the job finds the order paid
// and does nothing; if not, it closes the order and returns the stock.

declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

use Delayq\ConflictException;
use Delayq\DelayqException;
use Delayq\TimeoutException;
use Delayq\UnavailableException;

$sku = $argv[1] ?? 'tea';
$qty = (int) ($argv[2] ?? 1);
$env = getenv('ORDER_CLOSE_DELAY');
$delay = ($env === false || $env === '') ? 1800.0 : (float) $env;

$store = orders();
$order = $store->create($sku, $qty);
$jobId = 'order-' . $order['id'];

try {
    $client = delayq_client();
    for ($try = 1;; $try++) {
        try {
            $client->add('close-order', ['order' => $order['id']], ['id' => $jobId, 'delay' => $delay, 'ttr' => 30]);
            break;
        } catch (ConflictException $e) {
            if ($try === 1) {
                throw $e;  // a live job with this id that is not ours
            }
            break;  // our earlier attempt (answered 504) did take
        } catch (UnavailableException | TimeoutException $e) {
            // 503: nothing happened; 504: maybe it took. Adding again with the
            // same id is safe either way (a conflict then means it took).
            if ($try === 3) {
                throw $e;
            }
            usleep(200000 * $try);
        }
    }
} catch (DelayqException $e) {
    // Without its close-order job the order would stay open forever: refuse it.
    $store->cancel($order['id']);
    fwrite(STDERR, "order {$order['id']} NOT created: cannot schedule its closing: {$e->getMessage()}\n");
    exit(1);
}

printf("order %d created: %d x %s, unpaid; job %s closes it in %s s unless it is paid\n",
    $order['id'], $qty, $sku, $jobId, $delay);
