<?php
// php pay.php <order number>
//
// What the payment callback runs: marks the order paid, unless the
// close-order job was faster and already closed it.

declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

if (!isset($argv[1]) || !ctype_digit($argv[1])) {
    fwrite(STDERR, "usage: php pay.php <order number>\n");
    exit(2);
}
$id = (int) $argv[1];
try {
    $status = orders()->pay($id);
} catch (RuntimeException $e) {
    fwrite(STDERR, $e->getMessage() . "\n");
    exit(1);
}
if ($status !== 'paid') {
    fwrite(STDERR, "order $id is $status: too late to pay it\n");
    exit(1);
}
echo "order $id paid\n";
// The close-order job stays: when it comes, it finds the order paid and does
// nothing. (Deleting it here, $client->delete("order-$id"), would save that
// trip; it is not needed for correctness.)
